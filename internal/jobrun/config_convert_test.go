package jobrun

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// fillDistinct sets every field of the struct v points to a value of its
// own (i+1 for field i), so that a conversion that swapped two fields of
// one type would show.
func fillDistinct(t *testing.T, v any) {
	t.Helper()
	s := reflect.ValueOf(v).Elem()
	for i := range s.NumField() {
		f := s.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString("ad44")
		case reflect.Pointer:
			f.Set(reflect.ValueOf(&messages.BudgetValue{Count: i + 1}))
		default:
			t.Fatalf("field %s: kind %s has no test value", s.Type().Field(i).Name, f.Kind())
		}
	}
}

// The public settings are converted to the internal ones in one place
// each (Provision.config, BudgetSettings.settings); the conversion keeps
// every field, and the defaults the public Config fills are the internal
// package's.
func TestSettingsConvertFieldForField(t *testing.T) {
	t.Parallel()
	var p Provision
	fillDistinct(t, &p)
	pc := p.config()
	for i := range reflect.TypeFor[Provision]().NumField() {
		require.Equal(t, reflect.ValueOf(p).Field(i).Interface(), reflect.ValueOf(pc).Field(i).Interface(), reflect.TypeFor[Provision]().Field(i).Name)
	}
	require.Equal(t, provision.Config{}.WithDefaults(), Config{}.WithDefaults().Provision.config())
	require.Equal(t, 30*time.Second, Config{}.WithDefaults().Provision.AckWait, "the default Provision's doc states")

	require.Equal(t, provision.DefaultWorkDupWindow, MinJobRetention, "a pruned id must outlive the streams' duplicate windows")

	var b BudgetSettings
	fillDistinct(t, &b)
	bs := b.settings()
	require.Equal(t, reflect.TypeFor[BudgetSettings]().NumField(), reflect.TypeFor[budget.Settings]().NumField())
	for i := range reflect.TypeFor[BudgetSettings]().NumField() {
		require.Equal(t, reflect.ValueOf(b).Field(i).Interface(), reflect.ValueOf(bs).Field(i).Interface(), reflect.TypeFor[BudgetSettings]().Field(i).Name)
	}
}
