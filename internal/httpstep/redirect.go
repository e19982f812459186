package httpstep

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// MaxRedirects bounds the redirects an http step follows: the
// request after the fifth redirect is not sent, and the step fails.
const MaxRedirects = 5

// ErrRedirectRefused is an http step's redirect that the agent does
// not follow: past MaxRedirects, to another scheme than http or https,
// with user information, or a 307/308 that would send a method other than
// GET or HEAD (and its body) to another origin. A redirect to an address
// the guard refuses fails with ErrAddressRefused instead.
var ErrRedirectRefused = errors.New("agent: http: redirect refused")

// redirectKeptHeaders are the step's headers a redirect to another origin
// still carries; every other one (Authorization, Cookie, an API key under
// any name, the Referer) stays behind.
var redirectKeptHeaders = map[string]bool{
	"Accept":          true,
	"Accept-Language": true,
	"Content-Type":    true,
	"User-Agent":      true,
}

// followRedirect is the http step's http.Client CheckRedirect: req is the
// request a redirect asks for, via the requests sent before it (via[0] the
// step's own). The client has already chosen req's method and body (a
// 301, 302 or 303 turns any method but HEAD into a GET without a body; a
// 307 or 308 keeps both), copied the step's headers, and its dialer checks
// req's address when it connects. The step's headers, but
// redirectKeptHeaders, are dropped from the first hop that leaves the
// step's origin (scheme, host and port) onwards, a hop back included: a
// server the step did not name chose where it goes.
func followRedirect(req *http.Request, via []*http.Request) error {
	hop := len(via)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: redirect %d to %s: %s", ErrRedirectRefused, hop, req.URL.Redacted(), fmt.Sprintf(format, args...))
	}
	if hop > MaxRedirects {
		return fmt.Errorf("%w: stopped after %d redirects (the bound is %d)", ErrRedirectRefused, MaxRedirects, MaxRedirects)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return refuse("not an http or https URL")
	}
	if req.URL.User != nil {
		return refuse("the URL holds user information")
	}
	first := via[0]
	left := origin(req.URL) != origin(first.URL)
	if left && req.Response != nil && (req.Response.StatusCode == http.StatusTemporaryRedirect || req.Response.StatusCode == http.StatusPermanentRedirect) &&
		req.Method != http.MethodGet && req.Method != http.MethodHead {
		return refuse("a %d would send %s and its body to another origin than %s", req.Response.StatusCode, req.Method, origin(first.URL))
	}
	for _, r := range via[1:] {
		left = left || origin(r.URL) != origin(first.URL)
	}
	if left {
		for h := range req.Header {
			if !redirectKeptHeaders[h] {
				req.Header.Del(h)
			}
		}
	}
	return nil
}

// origin is u's scheme, host and port (the scheme's default when u names
// none), lower case.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return strings.ToLower(u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port))
}
