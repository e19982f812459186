package httpstep

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
)

// serveOn starts h on ip (a loopback address: 127.0.0.2 is another host
// than 127.0.0.1 to the guard and to the redirect rules).
func serveOn(t *testing.T, ip string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// seen is what a server saw of one request.
type seen struct {
	method, path, body string
	header             http.Header
}

// recorder answers every request with answer and records what it saw.
func recorder(answer func(w http.ResponseWriter, r *http.Request)) (http.Handler, chan seen) {
	got := make(chan seen, 16)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{method: r.Method, path: r.URL.Path, body: string(b), header: r.Header.Clone()}
		answer(w, r)
	}), got
}

func redirectTo(code int, to string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", to)
		w.WriteHeader(code)
	}
}

func httpCall(with map[string]any) *Call {
	return &Call{JobID: "j", ItemID: "i", Attempt: 1, Item: json.RawMessage(`{}`), With: with}
}

// A redirect inside the allow-list is followed, to the same host and to
// another one the list names, and the answer at its end is the step's
// output; a 302 after a POST is a GET without the body, as in Go's client.
func TestHTTPRedirectFollowedWithinAllowList(t *testing.T) {
	hB, atB := recorder(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("arrived at " + r.URL.Path)) })
	b := serveOn(t, "127.0.0.2", hB)
	hA, atA := recorder(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/start":
			redirectTo(http.StatusFound, "/next")(w, r)
		case "/next":
			redirectTo(http.StatusMovedPermanently, b.URL+"/end")(w, r)
		}
	})
	a := serveOn(t, "127.0.0.1", hA)

	ag := agentStep(t, "127.0.0.1", "127.0.0.2")
	spans := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("t").Start(context.Background(), "step")
	out, err := ag.httpStep(ctx, httpCall(map[string]any{"url": a.URL + "/start", "body": `{"x": 1}`}))
	span.End()
	require.NoError(t, err)
	require.Equal(t, "arrived at /end", out)
	require.Contains(t, spans.Ended()[0].Attributes(), tracing.AttrHTTPFinalURL.String(b.URL+"/end"), "the span names the final URL")
	first, second, last := <-atA, <-atA, <-atB
	require.Equal(t, seen{method: "POST", path: "/start", body: `{"x": 1}`}, seen{first.method, first.path, first.body, nil})
	require.Equal(t, seen{method: "GET", path: "/next"}, seen{second.method, second.path, second.body, nil})
	require.Equal(t, seen{method: "GET", path: "/end"}, seen{last.method, last.path, last.body, nil})
}

// A redirect to an address the guard refuses fails the step for good,
// naming the hop, and nothing reaches that address: the first server is
// allowed (127.0.0.1), the second (127.0.0.2, loopback) is not.
func TestHTTPRedirectToRefusedAddress(t *testing.T) {
	var calls atomic.Int32
	inner := serveOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"server_id": "secret"}`))
	}))
	outer := serveOn(t, "127.0.0.1", http.HandlerFunc(redirectTo(http.StatusFound, inner.URL+"/varz")))

	ag := agentStep(t, "127.0.0.1")
	_, err := ag.httpStep(context.Background(), httpCall(map[string]any{"url": outer.URL + "/go"}))
	require.ErrorIs(t, err, ErrAddressRefused)
	require.True(t, retry.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "http GET "+outer.URL+"/go (redirected to "+inner.URL+"/varz): ")
	require.Zero(t, calls.Load(), "the refused server was called")

	// With no allow-list, loopback is refused from the first hop on: the
	// default refusal is the same rule at every hop.
	_, err = agentStep(t).httpStep(context.Background(), httpCall(map[string]any{"url": outer.URL + "/go"}))
	require.ErrorIs(t, err, ErrAddressRefused)
	require.Zero(t, calls.Load())
}

// Across origins the step's credentials stay behind: Authorization,
// Cookie, a key under its own name and the Referer are not sent to the
// other host, nor back to the first one once a hop has left it; Accept
// and Content-Type go on. A redirect within the origin keeps them all.
func TestHTTPRedirectDropsCredentialsAcrossHosts(t *testing.T) {
	var aURL string
	hB, atB := recorder(func(w http.ResponseWriter, r *http.Request) {
		redirectTo(http.StatusFound, aURL+"/back")(w, r)
	})
	b := serveOn(t, "127.0.0.2", hB)
	hA, atA := recorder(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/start":
			redirectTo(http.StatusSeeOther, "/same")(w, r)
		case "/same":
			redirectTo(http.StatusFound, b.URL+"/other")(w, r)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	a := serveOn(t, "127.0.0.1", hA)
	aURL = a.URL

	ag := agentStep(t, "127.0.0.0/8")
	out, err := ag.httpStep(context.Background(), httpCall(map[string]any{"url": a.URL + "/start", "headers": map[string]any{
		"Authorization": "Bearer secret", "Cookie": "session=secret", "X-Api-Key": "secret", "Accept": "text/plain",
	}}))
	require.NoError(t, err)
	require.Equal(t, "ok", out)
	creds := func(h http.Header) []string {
		var got []string
		for _, k := range []string{"Authorization", "Cookie", "X-Api-Key", "Referer"} {
			if v := h.Get(k); v != "" {
				got = append(got, k+"="+v)
			}
		}
		return got
	}
	start, same, other, back := <-atA, <-atA, <-atB, <-atA
	require.Equal(t, []string{"Authorization=Bearer secret", "Cookie=session=secret", "X-Api-Key=secret"}, creds(start.header))
	require.Equal(t, []string{"Authorization=Bearer secret", "Cookie=session=secret", "X-Api-Key=secret", "Referer=" + a.URL + "/start"}, creds(same.header))
	require.Empty(t, creds(other.header), "sent to the other host")
	require.Equal(t, "/back", back.path)
	require.Empty(t, creds(back.header), "sent back to the first host after a hop left it")
	for _, s := range []seen{start, same, other, back} {
		require.Equal(t, "text/plain", s.header.Get("Accept"), s.path)
	}
}

// A redirect chain stops at MaxRedirects: the request after the fifth
// redirect is not sent, and the step fails for good, saying so.
func TestHTTPRedirectBound(t *testing.T) {
	h, got := recorder(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r"))
		redirectTo(http.StatusFound, fmt.Sprintf("/r%d", n+1))(w, r)
	})
	srv := serveOn(t, "127.0.0.1", h)
	ag := agentStep(t, "127.0.0.1")
	_, err := ag.httpStep(context.Background(), httpCall(map[string]any{"url": srv.URL + "/r0"}))
	require.ErrorIs(t, err, ErrRedirectRefused)
	require.True(t, retry.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "stopped after 5 redirects (the bound is 5)")
	require.Len(t, got, MaxRedirects+1, "the step's request and 5 redirects")
}

// A 307 or 308 keeps the method and the body: followed within the origin,
// refused to another one (the body is not sent there); a redirect to
// another scheme than http or https is refused; a failed answer at the
// end of a chain names its URL.
func TestHTTPRedirectKeepsMethodAndBodyInOrigin(t *testing.T) {
	var calls atomic.Int32
	other := serveOn(t, "127.0.0.2", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	h, got := recorder(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			redirectTo(http.StatusTemporaryRedirect, "/there")(w, r)
		case "/cross":
			redirectTo(http.StatusPermanentRedirect, other.URL+"/there")(w, r)
		case "/file":
			redirectTo(http.StatusFound, "file:///etc/passwd")(w, r)
		case "/gone":
			redirectTo(http.StatusFound, "/missing")(w, r)
		case "/missing":
			http.NotFound(w, r)
		default:
			_, _ = w.Write([]byte("took " + r.Method))
		}
	})
	srv := serveOn(t, "127.0.0.1", h)
	ag := agentStep(t, "127.0.0.0/8")

	out, err := ag.httpStep(context.Background(), httpCall(map[string]any{"url": srv.URL + "/same", "method": "PUT", "body": "payload"}))
	require.NoError(t, err)
	require.Equal(t, "took PUT", out)
	<-got
	there := <-got
	require.Equal(t, "payload", there.body)

	_, err = ag.httpStep(context.Background(), httpCall(map[string]any{"url": srv.URL + "/cross", "body": "payload"}))
	require.ErrorIs(t, err, ErrRedirectRefused)
	require.True(t, retry.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "redirect 1 to "+other.URL+"/there: a 308 would send POST and its body to another origin")
	require.Zero(t, calls.Load())
	<-got

	_, err = ag.httpStep(context.Background(), httpCall(map[string]any{"url": srv.URL + "/file"}))
	require.ErrorIs(t, err, ErrRedirectRefused)
	require.ErrorContains(t, err, "redirect 1 to file:///etc/passwd: not an http or https URL")
	<-got

	// A failure after redirects names the URL that answered.
	_, err = ag.httpStep(context.Background(), httpCall(map[string]any{"url": srv.URL + "/gone"}))
	require.True(t, retry.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "http status 404 Not Found (redirected to "+srv.URL+"/missing): 404 page not found")
}
