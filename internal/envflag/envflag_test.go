package envflag

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEnv(t *testing.T) {
	tests := []struct {
		name    string
		value   string // "" = unset
		read    func(*Env) any
		want    any
		wantErr string
	}{
		{"string set", "x", func(e *Env) any { return e.String("K", "d") }, "x", ""},
		{"string unset", "", func(e *Env) any { return e.String("K", "d") }, "d", ""},
		{"int set", "42", func(e *Env) any { return e.Int("K", 1) }, 42, ""},
		{"int negative", "-1", func(e *Env) any { return e.Int("K", 1) }, -1, ""},
		{"int unset", "", func(e *Env) any { return e.Int("K", 1) }, 1, ""},
		{"int malformed", "abc", func(e *Env) any { return e.Int("K", 1) }, 1, `K: "abc" is not an integer`},
		{"int64 set", "9000000000", func(e *Env) any { return e.Int64("K", 1) }, int64(9000000000), ""},
		{"int64 malformed", "4.5", func(e *Env) any { return e.Int64("K", 1) }, int64(1), `K: "4.5" is not an integer`},
		{"duration set", "1m30s", func(e *Env) any { return e.Duration("K", time.Second) }, 90 * time.Second, ""},
		{"duration unset", "", func(e *Env) any { return e.Duration("K", time.Second) }, time.Second, ""},
		{"duration malformed", "5x", func(e *Env) any { return e.Duration("K", time.Second) }, time.Second, `K: "5x" is not a duration`},
		{"duration without unit", "30", func(e *Env) any { return e.Duration("K", time.Second) }, time.Second, `K: "30" is not a duration`},
		{"bool true", "true", func(e *Env) any { return e.Bool("K", false) }, true, ""},
		{"bool 0", "0", func(e *Env) any { return e.Bool("K", true) }, false, ""},
		{"bool unset", "", func(e *Env) any { return e.Bool("K", true) }, true, ""},
		{"bool malformed", "yes", func(e *Env) any { return e.Bool("K", false) }, false, `K: "yes" is not a bool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(func(k string) string {
				if k == "K" {
					return tt.value
				}
				return ""
			})
			require.Equal(t, tt.want, tt.read(e))
			if tt.wantErr == "" {
				require.NoError(t, e.Err())
				return
			}
			require.ErrorContains(t, e.Err(), tt.wantErr)
			var ee *Error
			require.True(t, errors.As(e.Err(), &ee), "an *envflag.Error")
			require.Equal(t, "K", ee.Key)
			require.Equal(t, tt.value, ee.Value)
		})
	}
}

// Every malformed variable is reported, not only the first.
func TestEnvReportsEveryMalformedVariable(t *testing.T) {
	env := map[string]string{"A": "abc", "B": "ok", "C": "5x"}
	e := New(func(k string) string { return env[k] })
	e.Int("A", 1)
	e.String("B", "")
	e.Duration("C", 0)
	require.EqualError(t, e.Err(), "A: \"abc\" is not an integer\nC: \"5x\" is not a duration (e.g. \"30s\", \"5m\")")
}

func TestExitCode(t *testing.T) {
	e := New(func(string) string { return "abc" })
	e.Int("K", 0)
	require.Equal(t, 2, ExitCode(fmt.Errorf("start: %w", e.Err())))
	require.Equal(t, 1, ExitCode(errors.New("connect: refused")))
}
