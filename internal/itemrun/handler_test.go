package itemrun

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
)

func TestFlakyFailRateIsCloseToAsked(t *testing.T) {
	for _, rate := range []float64{0.1, 0.35, 0.9} {
		fails := 0
		const n = 4000
		for i := 1; i <= n; i++ {
			_, err := flakyHandler(context.Background(), &Call{
				With: map[string]any{"fail_rate": rate, "seed": 42.0}, ItemID: fmt.Sprintf("img-%04d", i), Attempt: 1,
			})
			if err != nil {
				fails++
			}
		}
		got := float64(fails) / n
		require.InDelta(t, rate, got, 0.03, "fail_rate %.2f produced %.3f", rate, got)
	}
}

func TestFlakyIsDeterministicPerItemAndAttempt(t *testing.T) {
	call := func(item string, attempt int) error {
		_, err := flakyHandler(context.Background(), &Call{With: map[string]any{"fail_rate": 0.5, "seed": 7.0}, ItemID: item, Attempt: attempt})
		return err
	}
	differs := false
	for i := range 50 {
		item := fmt.Sprintf("x%d", i)
		require.Equal(t, call(item, 1) == nil, call(item, 1) == nil, "same item and attempt, same outcome")
		if (call(item, 1) == nil) != (call(item, 2) == nil) {
			differs = true
		}
	}
	require.True(t, differs, "attempts of an item must be drawn independently")
}

func TestFlakyFailAttemptsAndPermanent(t *testing.T) {
	c := &Call{With: map[string]any{"fail_attempts": 2.0}, ItemID: "a"}
	for attempt, wantErr := range map[int]bool{1: true, 2: true, 3: false} {
		c.Attempt = attempt
		_, err := flakyHandler(context.Background(), c)
		require.Equal(t, wantErr, err != nil, "attempt %d", attempt)
	}
	_, err := flakyHandler(context.Background(), &Call{With: map[string]any{"permanent_rate": 1.0}, ItemID: "b", Attempt: 1})
	require.True(t, retry.IsPermanent(err))
	_, err = flakyHandler(context.Background(), &Call{With: map[string]any{"fail_rate": "lots"}, ItemID: "c", Attempt: 1})
	require.True(t, retry.IsPermanent(err), "a bad argument is not worth retrying")
	require.False(t, errors.Is(err, context.Canceled))
}
