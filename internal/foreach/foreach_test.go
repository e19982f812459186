package foreach

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLines(t *testing.T) {
	require.Equal(t, []string{"a", "b c", "d"}, Lines("a\n\n  b c \r\n\t\nd"))
	require.Empty(t, Lines("\n \n"))
}

func TestSelect(t *testing.T) {
	got, err := Select([]string{"a", "b", "c"}, 2, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, got)
	_, err = Select([]string{"a", "b", "c"}, 0, 2)
	require.ErrorContains(t, err, "3 elements, more than 2")
	got, err = Select([]string{"a", "b", "c"}, 2, 2)
	require.NoError(t, err, "max_items first, then the bound")
	require.Len(t, got, 2)
}

func TestRun(t *testing.T) {
	boom := errors.New("boom")
	failAt := func(bad int) func(context.Context, int) error {
		return func(_ context.Context, i int) error {
			if i == bad {
				return boom
			}
			return nil
		}
	}
	t.Run("sequential stops at the first failure", func(t *testing.T) {
		var order []int
		fails, ran := Run(t.Context(), 5, 0, false, func(ctx context.Context, i int) error {
			order = append(order, i)
			return failAt(1)(ctx, i)
		})
		require.Equal(t, []int{0, 1}, order)
		require.Equal(t, 2, ran)
		require.Equal(t, []Failure{{Index: 1, Err: boom}}, fails)
	})
	t.Run("continue_on_error runs them all", func(t *testing.T) {
		fails, ran := Run(t.Context(), 5, 1, true, failAt(3))
		require.Equal(t, 5, ran)
		require.Equal(t, []Failure{{Index: 3, Err: boom}}, fails)
	})
	t.Run("parallel runs at most N at a time, each once", func(t *testing.T) {
		var cur, peak atomic.Int32
		var mu sync.Mutex
		seen := map[int]int{}
		gate := make(chan struct{})
		started := make(chan struct{}, 20)
		go func() {
			for range 3 {
				<-started
			}
			close(gate) // three are running at once: let them all go
		}()
		fails, ran := Run(t.Context(), 20, 3, false, func(_ context.Context, i int) error {
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			started <- struct{}{}
			<-gate
			mu.Lock()
			seen[i]++
			mu.Unlock()
			cur.Add(-1)
			return nil
		})
		require.Empty(t, fails)
		require.Equal(t, 20, ran)
		require.EqualValues(t, 3, peak.Load())
		require.Len(t, seen, 20)
		for i, n := range seen {
			require.Equal(t, 1, n, "element %d", i)
		}
	})
	t.Run("a cancelled context hands out no more", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		fails, ran := Run(ctx, 5, 1, true, func(_ context.Context, i int) error {
			if i == 1 {
				cancel()
			}
			return nil
		})
		require.Empty(t, fails)
		require.Equal(t, 2, ran)
	})
}
