package retry

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Failure describes a failed run of a step, as the matchers see it.
type Failure struct {
	// Err is the error returned by a Go handler or built by the executor. It
	// is what a give-up decision wraps; marker errors are found in its chain.
	Err error
	// Message is the error text. Empty = Err.Error().
	Message string
	// Stderr is the tail of the command's standard error.
	Stderr string
	// ExitCode is the command's exit status; nil for handlers or when the
	// process did not exit (killed, not started).
	ExitCode *int
	// TimedOut is true when the step was killed by its timeout.
	TimedOut bool
}

// Text is what the regex matchers search: the message, the error text when
// it differs from the message, and stderr, one per line.
func (f Failure) Text() string {
	parts := make([]string, 0, 3)
	if f.Message != "" {
		parts = append(parts, f.Message)
	}
	if f.Err != nil {
		if s := f.Err.Error(); s != f.Message {
			parts = append(parts, s)
		}
	}
	if f.Stderr != "" {
		parts = append(parts, f.Stderr)
	}
	return strings.Join(parts, "\n")
}

// Error is f as an error: Err when set, otherwise one built from the message,
// the exit code or the timeout.
func (f Failure) Error() error {
	if f.Err != nil {
		return f.Err
	}
	switch {
	case f.Message != "":
		return errors.New(f.Message)
	case f.TimedOut:
		return errors.New("step timed out")
	case f.ExitCode != nil:
		return fmt.Errorf("exit status %d", *f.ExitCode)
	}
	return errors.New("step failed")
}

// Built-in matcher patterns. Each is case-insensitive and word-bounded, and
// searched over [Failure.Text]. Keep the table in doc.go in step with them.
var (
	// networkRE: connection refused/reset/closed/aborted, use of closed
	// network connection, no route to host, network/host unreachable, broken
	// pipe, unexpected EOF or EOF on a tcp/udp/unix connection or socket, DNS
	// failures (no such host, temporary failure in name resolution, name or
	// service not known, could not resolve host), TLS/SSL handshake errors,
	// "failed to connect", "dial tcp/udp/unix", "network error", and the
	// errno names ECONNREFUSED, ECONNRESET, ECONNABORTED, ENETUNREACH,
	// EHOSTUNREACH, ENETDOWN, EPIPE.
	networkRE = regexp.MustCompile(`(?i)\b(?:` +
		`connection\s+(?:refused|reset|closed|aborted)` +
		`|closed\s+network\s+connection` +
		`|no\s+route\s+to\s+host` +
		`|(?:network|host)\s+(?:is\s+)?unreachable` +
		`|broken\s+pipe` +
		`|unexpected\s+eof` +
		`|(?:tcp|udp|unix|conn|connection|socket)\b[^\n]*?\beof` +
		`|no\s+such\s+host` +
		`|temporary\s+failure\s+in\s+name\s+resolution` +
		`|name\s+or\s+service\s+not\s+known` +
		`|could\s+not\s+resolve\s+host` +
		`|(?:tls|ssl)\b[:\s]*handshake` +
		`|handshake\s+failure` +
		`|failed\s+to\s+connect` +
		`|dial\s+(?:tcp|udp|unix)[46]?` +
		`|network\s+error` +
		`|econnrefused|econnreset|econnaborted|enetunreach|ehostunreach|enetdown|epipe` +
		`)\b`)

	// timeoutRE: timeout(s), timed out, time out / time-out, deadline
	// exceeded (context.DeadlineExceeded, gRPC DeadlineExceeded), ETIMEDOUT.
	// The matcher also matches TimedOut=true and exit code 124 (timeout(1)).
	timeoutRE = regexp.MustCompile(`(?i)\b(?:` +
		`timeouts?|timed[\s-]?out|time[\s-]out` +
		`|deadline[\s_]+exceeded|deadlineexceeded|etimedout` +
		`)\b`)

	// serverErrorRE: an HTTP 5xx status, never a bare number: a 5xx code
	// followed by its reason phrase ("500 Internal Server Error", "502 Bad
	// Gateway"), the reason phrases alone (internal server error, bad
	// gateway, service [temporarily] unavailable, gateway timeout), "server
	// error", a status line "HTTP/1.1 502", a 5xx after status / status code
	// / http [status] / response [code] / error [code] / code ("status 503",
	// "status=500", "HTTP 502"), "5xx", and gRPC "code = Unavailable" or
	// "code = Internal". "processed 1500 items" and "port 5000" do not match.
	serverErrorRE = regexp.MustCompile(`(?i)(?:` +
		`\b5\d\d\s*[-:]?\s*(?:internal\s+server\s+error|not\s+implemented|bad\s+gateway` +
		`|service\s+(?:temporarily\s+)?unavailable|gateway\s+time-?out|http\s+version\s+not\s+supported` +
		`|insufficient\s+storage|loop\s+detected|network\s+authentication\s+required)\b` +
		`|\b(?:internal\s+server\s+error|bad\s+gateway|service\s+(?:temporarily\s+)?unavailable|gateway\s+time-?out)\b` +
		`|\bserver\s+error\b` +
		`|\bhttps?/\d(?:\.\d)?\s+5\d\d\b` +
		`|\b(?:status(?:\s*code)?|https?(?:\s*status)?|response(?:\s*code)?|error(?:\s*code)?|code)\s*[:=#]?\s*5\d\d\b` +
		`|\b5xx\b` +
		`|\bcode\s*=\s*(?:unavailable|internal)\b` +
		`)`)

	// rateLimitRE: HTTP 429 with context ("429 Too Many Requests", "HTTP/1.1
	// 429", "status 429", "code: 429", "got 429", or 429 alone on its line),
	// too many requests, rate limit / rate-limited / ratelimit(ed|ing|s|er),
	// throttle / throttled / throttling / ThrottlingException, quota
	// exceeded / exceeded … quota, slow down / SlowDown, resource exhausted
	// (gRPC RESOURCE_EXHAUSTED).
	rateLimitRE = regexp.MustCompile(`(?i)(?:` +
		`\b429\s*[-:]?\s*too\s+many\s+requests` +
		`|\btoo\s+many\s+requests\b` +
		`|\bhttps?/\d(?:\.\d)?\s+429\b` +
		`|\b(?:status(?:\s*code)?|https?(?:\s*status)?|response(?:\s*code)?|error(?:\s*code)?|code|got|received|returned)\s*[:=#]?\s*429\b` +
		`|(?m:^\s*429\s*$)` +
		`|\brate[\s_-]?limit(?:s|ed|ing|er)?\b` +
		`|\bthrottl` +
		`|\bquota\s+exceeded\b|\bexceeded\s+(?:your\s+|the\s+)?(?:\w+\s+)?quota\b` +
		`|\bslow\s?down\b` +
		`|\bresource[\s_]?exhausted\b` +
		`)`)
)

// timeoutExitCode is the exit status of timeout(1) when it kills its command.
const timeoutExitCode = 124

// builtinOrder is the order in which [Classify] tries the built-ins: the
// most specific class first ("504 Gateway Timeout" is a timeout, "dial tcp:
// i/o timeout" is a timeout, "429" is a rate limit rather than a failure).
var builtinOrder = []string{messages.MatchTimeout, messages.MatchRateLimit, messages.MatchServerError, messages.MatchNetwork}

// ClassError is the class of an error no built-in matches.
const ClassError = "error"

// Matcher is a compiled retry_on entry. The zero Matcher matches nothing.
// It is immutable and safe for concurrent use.
type Matcher struct {
	builtin string
	re      *regexp.Regexp
	codes   []int
}

// CompileMatcher compiles a retry_on entry: exactly one of a built-in name
// (network, timeout, server_error, rate_limit), a pattern (a Go RE2 regex
// searched, case-sensitively unless it says (?i), over [Failure.Text]) or a
// non-empty list of exit codes.
func CompileMatcher(m messages.Matcher) (Matcher, error) {
	set := 0
	for _, ok := range []bool{m.Builtin != "", m.Pattern != "", len(m.ExitCodes) > 0} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return Matcher{}, problem("a matcher is exactly one of a built-in name, {pattern: regex} or {exit_code: [codes]}")
	}
	switch {
	case m.Builtin != "":
		b, ok := BuiltinMatcher(m.Builtin)
		if !ok {
			return Matcher{}, problem("unknown built-in matcher %q (want network, timeout, server_error or rate_limit)", m.Builtin)
		}
		return b, nil
	case m.Pattern != "":
		re, err := regexp.Compile(m.Pattern)
		if err != nil {
			return Matcher{}, problem("invalid regex: %v", err)
		}
		return Matcher{re: re}, nil
	}
	return Matcher{codes: slices.Clone(m.ExitCodes)}, nil
}

// BuiltinMatcher returns the built-in matcher of that name.
func BuiltinMatcher(name string) (Matcher, bool) {
	switch name {
	case messages.MatchNetwork:
		return Matcher{builtin: name, re: networkRE}, true
	case messages.MatchTimeout:
		return Matcher{builtin: name, re: timeoutRE}, true
	case messages.MatchServerError:
		return Matcher{builtin: name, re: serverErrorRE}, true
	case messages.MatchRateLimit:
		return Matcher{builtin: name, re: rateLimitRE}, true
	}
	return Matcher{}, false
}

// Match reports whether f is selected by m.
func (m Matcher) Match(f Failure) bool {
	if m.builtin == messages.MatchTimeout && (f.TimedOut || f.ExitCode != nil && *f.ExitCode == timeoutExitCode) {
		return true
	}
	if m.re != nil {
		return matchText(m.re, f.Text())
	}
	if len(m.codes) > 0 {
		return f.ExitCode != nil && slices.Contains(m.codes, *f.ExitCode)
	}
	return false
}

// String is the matcher as written in retry_on.
func (m Matcher) String() string {
	switch {
	case m.builtin != "":
		return m.builtin
	case m.re != nil:
		return "{pattern: " + strconv.Quote(m.re.String()) + "}"
	case len(m.codes) > 0:
		cs := make([]string, len(m.codes))
		for i, c := range m.codes {
			cs[i] = strconv.Itoa(c)
		}
		return "{exit_code: [" + strings.Join(cs, ", ") + "]}"
	}
	return "{}"
}

// Retryable reports whether f may be retried under retry_on: true when
// retry_on is empty, otherwise when any matcher matches. Marker errors are
// not considered here; see [Policy.Decide].
func (p *Policy) Retryable(f Failure) bool {
	if len(p.matchers) == 0 {
		return true
	}
	for _, m := range p.matchers {
		if m.Match(f) {
			return true
		}
	}
	return false
}

// Classify returns the first built-in class matching f, trying timeout,
// rate_limit, server_error and network in that order, or "error" — the
// error_class recorded in attempts and dead letters.
func Classify(f Failure) string {
	for _, name := range builtinOrder {
		m, _ := BuiltinMatcher(name)
		if m.Match(f) {
			return name
		}
	}
	return ClassError
}

// Matching a failure's text against the built-in patterns costs tens of
// microseconds (they backtrack over every word), and a step that fails
// often fails with the same text: every retried failure is matched against
// up to four of them (Classify) and its retry_on. matchText remembers the
// answers for texts up to memoTextBytes, memoEntries of them at most (all
// forgotten at once when full): a pure function of the pattern and the
// text, so nothing it returns differs from MatchString.
const (
	memoTextBytes = 2048
	memoEntries   = 4096
)

type memoKey struct {
	re   *regexp.Regexp
	text string
}

var (
	memoMu sync.Mutex
	memo   = make(map[memoKey]bool)
)

// matchText is re.MatchString(text), remembered (see above).
func matchText(re *regexp.Regexp, text string) bool {
	if len(text) > memoTextBytes {
		return re.MatchString(text)
	}
	k := memoKey{re, text}
	memoMu.Lock()
	ok, known := memo[k]
	memoMu.Unlock()
	if known {
		return ok
	}
	ok = re.MatchString(text)
	memoMu.Lock()
	if len(memo) >= memoEntries {
		clear(memo)
	}
	memo[k] = ok
	memoMu.Unlock()
	return ok
}
