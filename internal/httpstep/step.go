package httpstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Name is the built-in handler that calls an HTTP endpoint:
// `handler: http` with `with: {url, method, headers, body, timeout}`,
// each string templated over the item like a shell step's values (in the
// URL, every value is escaped for where it lands: path or query). A 2xx
// response succeeds with its body (at most MaxBody bytes) as the
// step's output; 429 fails as rate_limit, 5xx as server_error, 408 and
// timeouts as timeout, connection errors as network, any other status
// permanently; a Retry-After header (seconds or an HTTP date) becomes
// the retry's delay (retry.After). Redirects are followed up to MaxRedirects, each hop's
// address checked like the first (followRedirect says which, and which
// headers go on); a 3xx not followed fails permanently. One http.Client is shared by every call of the agent, so
// connections are reused. A handler registered under the same name
// replaces it.
const Name = "http"

// Bounds of the http handler.
const (
	// MaxBody bounds the response body kept as the step's output.
	MaxBody = 1 << 20
	// DefaultTimeout bounds a call whose step sets no timeout.
	DefaultTimeout = 30 * time.Second
	// maxRetryAfter bounds a Retry-After hint.
	maxRetryAfter = time.Hour
)

// httpClient is shared by every http step: its transport keeps
// connections to each host for reuse.
var httpClient = &http.Client{
	Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	},
	CheckRedirect: followRedirect,
}

// Call is what an http step reads of its attempt.
type Call struct {
	JobID, ItemID string
	// Attempt is the 1-based attempt number of the step.
	Attempt int
	// Item is the item's JSON payload, With the step's arguments.
	Item json.RawMessage
	With map[string]any
}

// httpArgs are an http step's arguments.
type httpArgs struct {
	URL, Method, Body string
	Headers           map[string]string
	Timeout           time.Duration
}

// parseHTTPArgs reads and expands with over the call's item.
func parseHTTPArgs(c *Call) (httpArgs, error) {
	vars := wire.TemplateVars{Item: c.Item, ItemID: c.ItemID, JobID: c.JobID, Attempt: c.Attempt}
	render := func(field string, v any, esc func(string, string) string) (string, error) {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("with.%s: want a string, got %T", field, v)
		}
		t, err := wire.ParseTemplate(s)
		if err != nil {
			return "", fmt.Errorf("with.%s: %w", field, err)
		}
		out, err := t.Render(vars, esc)
		if err != nil {
			return "", fmt.Errorf("with.%s: %w", field, err)
		}
		return out, nil
	}
	var a httpArgs
	for k, v := range c.With {
		var err error
		switch k {
		case "url":
			// The scheme, host and port are the template's own; values
			// fill path segments and query values only.
			s, ok := v.(string)
			if !ok {
				return a, fmt.Errorf("with.url: want a string, got %T", v)
			}
			t, perr := wire.ParseTemplate(s)
			if perr != nil {
				return a, fmt.Errorf("with.url: %w", perr)
			}
			if a.URL, err = wire.RenderURL(t, vars); err != nil {
				err = fmt.Errorf("with.url: %w", err)
			}
		case "method":
			a.Method, err = render(k, v, nil)
		case "body":
			if _, isStr := v.(string); !isStr {
				// An object or array is sent as JSON, as written.
				b, jerr := json.Marshal(v)
				a.Body, err = string(b), jerr
				break
			}
			a.Body, err = render(k, v, nil)
		case "headers":
			m, ok := v.(map[string]any)
			if !ok {
				return a, fmt.Errorf("with.headers: want an object of strings, got %T", v)
			}
			a.Headers = make(map[string]string, len(m))
			for h, hv := range m {
				if a.Headers[h], err = render("headers."+h, hv, nil); err != nil {
					break
				}
			}
		case "timeout":
			s, ok := v.(string)
			if !ok {
				return a, fmt.Errorf("with.timeout: want a duration string such as \"10s\", got %T", v)
			}
			var d messages.Duration
			if d, err = messages.ParseDuration(s); err == nil && d <= 0 {
				err = errors.New("must be positive")
			}
			if err != nil {
				err = fmt.Errorf("with.timeout: %w", err)
			}
			a.Timeout = d.D()
		default:
			return a, fmt.Errorf("with.%s: unknown argument (use url, method, headers, body, timeout)", k)
		}
		if err != nil {
			return a, err
		}
	}
	if a.URL == "" {
		return a, errors.New("with.url: required")
	}
	if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") {
		return a, fmt.Errorf("with.url: %q is not an http or https URL", a.URL)
	}
	if a.Method == "" {
		a.Method = http.MethodGet
		if a.Body != "" {
			a.Method = http.MethodPost
		}
	}
	a.Method = strings.ToUpper(a.Method)
	return a, nil
}

// httpHandler is the http step with the package's client, which reaches
// any address (tests); an agent's http steps use a Guard's Client.
func httpHandler(ctx context.Context, c *Call) (any, error) { return Do(ctx, httpClient, c) }

// Do makes an http step's call with client: its output, or an error
// that says how to retry it (retry.Permanent, retry.After).
func Do(ctx context.Context, client *http.Client, c *Call) (any, error) {
	a, err := parseHTTPArgs(c)
	if err != nil {
		return nil, retry.Permanent(err)
	}
	timeout := a.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if a.Body != "" {
		body = strings.NewReader(a.Body)
	}
	req, err := http.NewRequestWithContext(ctx, a.Method, a.URL, body)
	if err != nil {
		return nil, retry.Permanent(fmt.Errorf("http: %w", err))
	}
	for h, v := range a.Headers {
		req.Header.Set(h, v)
	}
	if a.Body != "" && req.Header.Get("Content-Type") == "" && json.Valid([]byte(a.Body)) {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	where := req.URL.Redacted()
	if err != nil {
		// The client's error names the request that failed: a redirect's
		// hop is named beside the step's URL, and not repeated.
		var ue *url.Error
		if errors.As(err, &ue) {
			if hop, perr := url.Parse(ue.URL); perr == nil && hop.String() != req.URL.String() {
				where += " (redirected to " + hop.Redacted() + ")"
			}
			err = ue.Err
		}
	}
	if errors.Is(err, ErrAddressRefused) || errors.Is(err, ErrRedirectRefused) {
		return nil, retry.Permanent(fmt.Errorf("http %s %s: %w", a.Method, where, err))
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, fmt.Errorf("http %s %s: timeout after %s", a.Method, where, timeout)
		}
		return nil, fmt.Errorf("http %s %s: network error: %w", a.Method, where, err)
	}
	defer resp.Body.Close()
	redirectedTo := ""
	if final := resp.Request.URL; final.String() != req.URL.String() {
		// The step followed redirects: its span and a failure's error
		// name where the answer came from.
		redirectedTo = final.Redacted()
		where += " (redirected to " + redirectedTo + ")"
		trace.SpanFromContext(ctx).SetAttributes(tracing.AttrHTTPFinalURL.String(redirectedTo))
	}
	out, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody)) // lets the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if rerr != nil {
			return nil, fmt.Errorf("http %s %s: reading the response: network error: %w", a.Method, where, rerr)
		}
		return string(out), nil
	}
	err = httpStatusError(resp.StatusCode, redirectedTo, out)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout:
		// An HTTP-date is the remote server's time: measured from its own
		// Date header when it sends one, not from this machine's clock.
		now := time.Now()
		if date, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			now = date
		}
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), now); ok {
			return nil, retry.After(d, err)
		}
		return nil, err
	}
	return nil, retry.Permanent(err)
}

// httpStatusError describes a failed response in words the built-in
// matchers know: "status 429 Too Many Requests", "status 503 Service
// Unavailable", "status 408 Request Timeout"; redirectedTo, when not
// empty, is the URL that answered after redirects.
func httpStatusError(code int, redirectedTo string, body []byte) error {
	msg := fmt.Sprintf("http status %d %s", code, http.StatusText(code))
	switch {
	case code >= 500 && !strings.Contains(strings.ToLower(http.StatusText(code)), "error"):
		msg += " (server error)"
	case code == http.StatusRequestTimeout:
		msg += " (timeout)"
	}
	if redirectedTo != "" {
		msg += " (redirected to " + redirectedTo + ")"
	}
	if b := strings.TrimSpace(string(body)); b != "" {
		msg += ": " + truncate(b, 512)
	}
	return errors.New(msg)
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	if h = strings.TrimSpace(h); h == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// truncate keeps the tail of s: its last n bytes at most, cut on a rune
// boundary so that a valid UTF-8 s stays valid.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - max(n, 0)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
