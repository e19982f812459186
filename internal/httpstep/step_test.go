package httpstep

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestHTTPHandler(t *testing.T) {
	var got *http.Request
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		switch r.URL.Query().Get("status") {
		case "429":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "404":
			w.WriteHeader(http.StatusNotFound)
		default:
			_, _ = w.Write([]byte("hello " + r.URL.Path))
		}
	}))
	defer srv.Close()
	call := func(with map[string]any, item string) (any, error) {
		return httpHandler(context.Background(), &Call{JobID: "j", ItemID: "i", Attempt: 1, Item: json.RawMessage(item), With: with})
	}

	out, err := call(map[string]any{
		"url":     srv.URL + "/u/${item.name}?q=${item.q}&status=${item.status}",
		"headers": map[string]any{"X-Tenant": "${item.tenant}"},
		"body":    map[string]any{"a": 1},
	}, `{"name": "a b/c", "q": "x&y=z", "status": "", "tenant": "red"}`)
	require.NoError(t, err)
	require.Equal(t, "/u/a b/c", got.URL.Path, "a value's slash stays inside its segment")
	require.Equal(t, "/u/a%20b%2Fc", got.URL.EscapedPath())
	require.Equal(t, "x&y=z", got.URL.Query().Get("q"), "query values are query-escaped")
	require.Equal(t, "red", got.Header.Get("X-Tenant"))
	require.Equal(t, http.MethodPost, got.Method, "a body means POST")
	require.JSONEq(t, `{"a": 1}`, gotBody)
	require.Equal(t, "hello /u/a b/c", out)

	classify := func(err error) string { return retry.Classify(retry.Failure{Err: err}) }
	_, err = call(map[string]any{"url": srv.URL + "/?status=429"}, `{}`)
	require.Equal(t, messages.MatchRateLimit, classify(err), "%v", err)
	d, ok := retry.AfterDelay(err)
	require.True(t, ok)
	require.Equal(t, 7*time.Second, d)

	_, err = call(map[string]any{"url": srv.URL + "/?status=503"}, `{}`)
	require.Equal(t, messages.MatchServerError, classify(err), "%v", err)
	require.False(t, retry.IsPermanent(err))

	_, err = call(map[string]any{"url": srv.URL + "/?status=404"}, `{}`)
	require.True(t, retry.IsPermanent(err), "%v", err)

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err = call(map[string]any{"url": closed.URL + "/"}, `{}`)
	require.Equal(t, messages.MatchNetwork, classify(err), "%v", err)

	for _, bad := range []map[string]any{
		{},
		{"url": "ftp://x"},
		{"url": srv.URL, "verb": "GET"},
		{"url": srv.URL + "/${item.missing}"},
		{"url": srv.URL, "timeout": "soon"},
	} {
		_, err := call(bad, `{}`)
		require.True(t, retry.IsPermanent(err), "%v: %v", bad, err)
		require.False(t, errors.Is(err, context.Canceled))
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	d, ok := retryAfter("120", now)
	require.True(t, ok)
	require.Equal(t, 2*time.Minute, d)
	d, ok = retryAfter(now.Add(30*time.Second).Format(http.TimeFormat), now)
	require.True(t, ok)
	require.Equal(t, 30*time.Second, d)
	_, ok = retryAfter("soon", now)
	require.False(t, ok)
}

// A Retry-After date is read against the remote server's Date, not this
// machine's clock: a server whose clock is 2 hours behind still asks for
// 30 s, not for no wait at all.
func TestHTTPRetryAfterDateIsTheServersTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		theirs := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
		w.Header().Set("Date", theirs.Format(http.TimeFormat))
		w.Header().Set("Retry-After", theirs.Add(30*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, err := httpHandler(context.Background(), &Call{JobID: "j", ItemID: "i", Attempt: 1, Item: json.RawMessage(`{}`),
		With: map[string]any{"url": srv.URL}})
	d, ok := retry.AfterDelay(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, 30*time.Second, d)
}

// A value fills a path segment or a query value, never the scheme, host or
// port: the attack (a value "@127.0.0.1:<port>" standing where the
// host ends) sends nothing, with its Authorization header, to the other
// server; a template that leaves the host to a value is refused, and so is
// any scheme but http and https.
func TestHTTPValuesStayInPathAndQuery(t *testing.T) {
	leaked := make(chan string, 4)
	attacker := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		leaked <- r.Header.Get("Authorization")
	}))
	defer attacker.Close()
	var paths []string
	api := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
	}))
	defer api.Close()
	call := func(url, item string) error {
		_, err := httpHandler(context.Background(), &Call{JobID: "j", ItemID: "i", Attempt: 1, Item: json.RawMessage(item),
			With: map[string]any{"url": url, "headers": map[string]any{"Authorization": "Bearer secret"}}})
		return err
	}
	hostOnly := strings.TrimPrefix(api.URL, "http://")
	attackerHost := strings.TrimPrefix(attacker.URL, "http://")
	for _, tc := range []struct{ url, item string }{
		{"http://" + hostOnly + "${item.p}/leak", `{"p": "@` + attackerHost + `"}`},
		{"http://api.example.invalid${item.p}/leak", `{"p": "@` + attackerHost + `"}`},
		{"${item.u}", `{"u": "` + attacker.URL + `/"}`},
		{"http://${item.h}/", `{"h": "` + attackerHost + `"}`},
		{"file:///etc/passwd", `{}`},
		{"http://user:pw@" + hostOnly + "/", `{}`},
	} {
		err := call(tc.url, tc.item)
		require.Error(t, err, tc.url)
		require.True(t, retry.IsPermanent(err), "%s: %v", tc.url, err)
	}
	select {
	case auth := <-leaked:
		t.Fatalf("the attacker's server was called, with Authorization %q", auth)
	default:
	}

	// Values land in their own path segment and query value.
	require.NoError(t, call(api.URL+"/v1/${item.a}/x?q=${item.b}", `{"a": "@`+attackerHost+`/..", "b": "1&admin=true#x"}`))
	require.NoError(t, call(api.URL+"/v1/${item.a}/x", `{"a": ".."}`))
	require.Equal(t, []string{
		"/v1/@" + attackerHost + "%2F../x?q=1%26admin%3Dtrue%23x",
		"/v1/%2E%2E/x?",
	}, paths)
}
