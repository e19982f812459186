package retry

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestBuiltinMatchers(t *testing.T) {
	tests := []struct {
		name    string
		builtin string
		f       Failure
		want    bool
	}{
		// network
		{"conn refused", messages.MatchNetwork, Failure{Message: "dial tcp 10.0.0.1:4222: connect: connection refused"}, true},
		{"conn reset", messages.MatchNetwork, Failure{Message: "read tcp 1.2.3.4:5->6.7.8.9:80: read: Connection Reset by peer"}, true},
		{"closed conn", messages.MatchNetwork, Failure{Err: errors.New("use of closed network connection")}, true},
		{"no route", messages.MatchNetwork, Failure{Stderr: "ssh: connect to host x port 22: No route to host"}, true},
		{"unreachable", messages.MatchNetwork, Failure{Message: "connect: network is unreachable"}, true},
		{"broken pipe", messages.MatchNetwork, Failure{Message: "write: broken pipe"}, true},
		{"eof on conn", messages.MatchNetwork, Failure{Message: `Post "http://x/y": read tcp 10.0.0.1:5->10.0.0.2:80: EOF`}, true},
		{"unexpected eof", messages.MatchNetwork, Failure{Message: "unexpected EOF"}, true},
		{"dns no such host", messages.MatchNetwork, Failure{Message: "dial tcp: lookup api.example.com: no such host"}, true},
		{"dns temporary", messages.MatchNetwork, Failure{Stderr: "curl: (6) Could not resolve host: x; Temporary failure in name resolution"}, true},
		{"tls handshake", messages.MatchNetwork, Failure{Message: "net/http: TLS handshake timeout"}, true},
		{"tls alert", messages.MatchNetwork, Failure{Message: "remote error: tls: handshake failure"}, true},
		{"errno", messages.MatchNetwork, Failure{Message: "Error: connect ECONNREFUSED 127.0.0.1:5432"}, true},
		{"not network: file eof", messages.MatchNetwork, Failure{Message: "parse config: EOF"}, false},
		{"not network: permission", messages.MatchNetwork, Failure{Message: "open /etc/x: permission denied"}, false},
		{"not network: connections word", messages.MatchNetwork, Failure{Message: "processed 3 connections"}, false},
		// timeout
		{"timed out flag", messages.MatchTimeout, Failure{TimedOut: true, ExitCode: ptr(-1)}, true},
		{"exit 124", messages.MatchTimeout, Failure{ExitCode: ptr(124)}, true},
		{"timeout word", messages.MatchTimeout, Failure{Message: "request Timeout after 30s"}, true},
		{"timed out", messages.MatchTimeout, Failure{Stderr: "curl: (28) Operation timed out after 5000 ms"}, true},
		{"deadline", messages.MatchTimeout, Failure{Err: fmt.Errorf("call: %w", errors.New("context deadline exceeded"))}, true},
		{"i/o timeout", messages.MatchTimeout, Failure{Message: "dial tcp 1.2.3.4:443: i/o timeout"}, true},
		{"not timeout: exit 1", messages.MatchTimeout, Failure{ExitCode: ptr(1), Message: "exit status 1"}, false},
		{"not timeout: timeouts_total", messages.MatchTimeout, Failure{Message: "metric http_timeouts_total missing"}, false},
		{"not timeout: overtime", messages.MatchTimeout, Failure{Message: "overtime not allowed"}, false},
		// server_error
		{"500 ISE", messages.MatchServerError, Failure{Message: "500 Internal Server Error"}, true},
		{"status 503", messages.MatchServerError, Failure{Message: "unexpected status 503"}, true},
		{"status code", messages.MatchServerError, Failure{Message: "status code: 500"}, true},
		{"status line", messages.MatchServerError, Failure{Stderr: "< HTTP/1.1 502"}, true},
		{"bad gateway", messages.MatchServerError, Failure{Message: "upstream said 502 Bad Gateway"}, true},
		{"phrase only", messages.MatchServerError, Failure{Message: "Service Unavailable"}, true},
		{"server error", messages.MatchServerError, Failure{Message: "server error, try later"}, true},
		{"http 504", messages.MatchServerError, Failure{Message: "HTTP 504"}, true},
		{"grpc unavailable", messages.MatchServerError, Failure{Message: "rpc error: code = Unavailable desc = x"}, true},
		{"not 1500 items", messages.MatchServerError, Failure{Message: "processed 1500 items"}, false},
		{"not port 5000", messages.MatchServerError, Failure{Message: "listen tcp :5000: bind: address already in use on port 5000"}, false},
		{"not bare 500", messages.MatchServerError, Failure{Message: "copied 500 files then failed"}, false},
		{"not 404", messages.MatchServerError, Failure{Message: "status 404 Not Found"}, false},
		{"not 5000 status", messages.MatchServerError, Failure{Message: "status 5000"}, false},
		// rate_limit
		{"429 phrase", messages.MatchRateLimit, Failure{Message: "429 Too Many Requests"}, true},
		{"status 429", messages.MatchRateLimit, Failure{Message: "API returned status 429"}, true},
		{"429 alone", messages.MatchRateLimit, Failure{Stderr: "error\n429\n"}, true},
		{"too many", messages.MatchRateLimit, Failure{Message: "too many requests"}, true},
		{"rate limited", messages.MatchRateLimit, Failure{Message: "you are Rate-Limited"}, true},
		{"rate limit exceeded", messages.MatchRateLimit, Failure{Message: "rate limit exceeded"}, true},
		{"throttling", messages.MatchRateLimit, Failure{Message: "ThrottlingException: Rate exceeded"}, true},
		{"quota", messages.MatchRateLimit, Failure{Message: "Quota exceeded for quota metric 'reads'"}, true},
		{"slow down", messages.MatchRateLimit, Failure{Message: "S3: SlowDown: Please reduce your request rate"}, true},
		{"not 1429", messages.MatchRateLimit, Failure{Message: "processed 1429 items"}, false},
		{"not 429 items", messages.MatchRateLimit, Failure{Message: "processed 429 items"}, false},
		{"not moderate", messages.MatchRateLimit, Failure{Message: "accelerate the limiter"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.builtin+"/"+tt.name, func(t *testing.T) {
			m, err := CompileMatcher(messages.Matcher{Builtin: tt.builtin})
			require.NoError(t, err)
			require.Equal(t, tt.want, m.Match(tt.f), "%q", tt.f.Text())
		})
	}
}

func TestPatternAndExitCodeMatchers(t *testing.T) {
	pat, err := CompileMatcher(messages.Matcher{Pattern: "conn.*refused"})
	require.NoError(t, err)
	require.True(t, pat.Match(Failure{Message: "connection refused"}))
	require.True(t, pat.Match(Failure{Stderr: "line1\nconn was refused"}))
	require.False(t, pat.Match(Failure{Message: "CONNECTION REFUSED"}), "patterns are case-sensitive unless (?i)")
	require.Equal(t, `{pattern: "conn.*refused"}`, pat.String())

	codes, err := CompileMatcher(messages.Matcher{ExitCodes: []int{2, 75}})
	require.NoError(t, err)
	require.True(t, codes.Match(Failure{ExitCode: ptr(75)}))
	require.False(t, codes.Match(Failure{ExitCode: ptr(1)}))
	require.False(t, codes.Match(Failure{Message: "exit 75"}), "no exit code")
	require.Equal(t, "{exit_code: [2, 75]}", codes.String())

	_, err = CompileMatcher(messages.Matcher{Pattern: "a(", ExitCodes: []int{1}})
	require.Error(t, err)
	_, err = CompileMatcher(messages.Matcher{Pattern: "a("})
	require.ErrorContains(t, err, "invalid regex")
	require.False(t, Matcher{}.Match(Failure{Message: "x"}))
}

func TestRetryable(t *testing.T) {
	all, err := NewPolicy(nil)
	require.NoError(t, err)
	require.True(t, all.Retryable(Failure{Message: "anything"}), "empty retry_on retries every error")

	p, err := NewPolicy(&messages.RetryConfig{RetryOn: []messages.Matcher{{Builtin: "network"}, {Builtin: "timeout"}, {ExitCodes: []int{75}}}})
	require.NoError(t, err)
	require.True(t, p.Retryable(Failure{Message: "connection refused"}))
	require.True(t, p.Retryable(Failure{TimedOut: true}))
	require.True(t, p.Retryable(Failure{ExitCode: ptr(75), Message: "tempfail"}))
	require.False(t, p.Retryable(Failure{ExitCode: ptr(1), Message: "syntax error"}))
}

func TestClassify(t *testing.T) {
	tests := []struct {
		msg  string
		f    Failure
		want string
	}{
		{"timeout wins over network", Failure{Message: "dial tcp 1.2.3.4:443: i/o timeout"}, messages.MatchTimeout},
		{"gateway timeout is a timeout", Failure{Message: "504 Gateway Timeout"}, messages.MatchTimeout},
		{"killed by timeout", Failure{TimedOut: true}, messages.MatchTimeout},
		{"rate limit", Failure{Message: "HTTP/1.1 429 Too Many Requests"}, messages.MatchRateLimit},
		{"server", Failure{Message: "HTTP/1.1 503 Service Unavailable"}, messages.MatchServerError},
		{"network", Failure{Message: "connection reset by peer"}, messages.MatchNetwork},
		{"other", Failure{Message: "processed 1500 items, then: permission denied"}, ClassError},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			require.Equal(t, tt.want, Classify(tt.f))
		})
	}
}

func TestFailureTextAndError(t *testing.T) {
	e := errors.New("boom")
	require.Equal(t, "boom", Failure{Err: e}.Text())
	require.Equal(t, "msg\nboom\nerr tail", Failure{Err: e, Message: "msg", Stderr: "err tail"}.Text())
	require.Same(t, e, Failure{Err: e}.Error())
	require.EqualError(t, Failure{Message: "m"}.Error(), "m")
	require.EqualError(t, Failure{ExitCode: ptr(3)}.Error(), "exit status 3")
	require.EqualError(t, Failure{TimedOut: true}.Error(), "step timed out")
	require.EqualError(t, Failure{}.Error(), "step failed")
}

func TestSignature(t *testing.T) {
	same := [][2]string{
		{"open /tmp/a/1.txt: no such file", "open /var/b.txt: no such file"},
		{"item 17 failed after 3 tries", "item 2048 failed after 5 tries"},
		{"dial tcp 10.0.0.1:4222: connection refused", "dial tcp 192.168.1.20:80: connection refused"},
		{`key "alpha" not found`, `key "beta-2" not found`},
		{"job 123e4567-e89b-12d3-a456-426614174000 gone", "job 00000000-0000-0000-0000-000000000000 gone"},
		{"object 5f3a9c0d1e2b missing", "object a1b2c3d4e5f6 missing"},
		{"GET https://api.example.com/v1/items?id=9: 500", "GET https://api.example.com/v1/users: 500"},
		{"Permission  denied", "permission denied"},
	}
	for _, p := range same {
		require.Equal(t, Signature(p[0]), Signature(p[1]), "%q vs %q: %q / %q", p[0], p[1], Normalize(p[0]), Normalize(p[1]))
	}
	require.NotEqual(t, Signature("open /tmp/a/1.txt: no such file"), Signature("permission denied"))
	require.NotEqual(t, Signature("connection refused"), Signature("connection reset"))
	require.Len(t, Signature("x"), 16)
	require.Equal(t, Signature("stable"), Signature("stable"))
	require.Equal(t, "open <path>: no such file", Normalize("open /tmp/a/1.txt: no such file"))
	require.Equal(t, "can't read <q>", Normalize("can't read 'x.txt'"))
}

// matchText answers as MatchString does, remembered or not, for texts
// under and over the remembered size, and keeps at most memoEntries.
func TestMatchTextRemembers(t *testing.T) {
	long := strings.Repeat("x", memoTextBytes) + " connection reset"
	for _, text := range []string{"connection reset by peer", "all fine", long, "HTTP/1.1 502"} {
		for _, re := range []*regexp.Regexp{networkRE, timeoutRE, serverErrorRE} {
			for range 2 {
				require.Equal(t, re.MatchString(text), matchText(re, text), "%s on %q", re, text)
			}
		}
	}
	for i := range memoEntries + 10 {
		matchText(timeoutRE, strconv.Itoa(i))
	}
	memoMu.Lock()
	n := len(memo)
	memoMu.Unlock()
	require.LessOrEqual(t, n, memoEntries)
}
