package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// contentSecurityPolicy allows nothing but the dashboard's own files: no
// inline script or style, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Names of the CSRF cookie and form field, and of the login cookie and
// query parameter.
const (
	csrfCookie = "jetfleet_session"
	csrfField  = "csrf"
	authCookie = "jetfleet_auth"
	tokenParam = "token"
	// maxFormBytes bounds a form post.
	maxFormBytes = 64 << 10
)

// guard is the dashboard's security layer: response headers, the Host
// check against DNS rebinding, the access token on every request, CSRF
// tokens on every POST, and read-only mode. Safe for concurrent use.
type guard struct {
	key      []byte // signs CSRF tokens and login cookies; new at every start
	access   string // the access token (Config.Token)
	readOnly bool
	// hosts, when not nil, are the Host header values accepted (loopback
	// names): a page of another site that resolves its own name to
	// 127.0.0.1 (DNS rebinding) is refused.
	hosts map[string]bool
}

func newGuard(addr, token string, allowRemote, readOnly bool) *guard {
	g := &guard{key: make([]byte, 32), access: token, readOnly: readOnly}
	if _, err := rand.Read(g.key); err != nil {
		panic("ui: no randomness: " + err.Error())
	}
	host, _, _ := net.SplitHostPort(addr)
	if !allowRemote || IsLoopback(host) {
		g.hosts = map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, host: true}
	}
	return g
}

// wrap applies the headers and checks to every request.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: with no-referrer a browser sends
		// "Origin: null" on its own form posts, which the Origin check
		// below must refuse.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if g.hosts != nil && !g.hosts[hostOnly(r.Host)] {
			http.Error(w, "ui: unexpected Host header (the dashboard answers to localhost only)", http.StatusMisdirectedRequest)
			return
		}
		if !g.authorized(w, r) {
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodPost:
			if g.readOnly {
				http.Error(w, ErrReadOnly.Error(), http.StatusForbidden)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := g.checkPost(r); err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostOnly strips the port from a Host header.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return strings.Trim(host, "[]")
	}
	return strings.Trim(h, "[]")
}

// session returns the visitor's session id, setting the cookie when the
// request has none. The cookie is HttpOnly and SameSite=Strict: another
// site's page can neither read it nor send it along with a form.
func (g *guard) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("ui: no randomness: " + err.Error())
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	return id
}

// token is the CSRF token of a session: an HMAC of the session id under a
// key that never leaves the server.
func (g *guard) token(session string) string {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkPost accepts a POST that carries the session cookie, the token of
// that session in its form, and (when the browser sends one) an Origin of
// this very host.
func (g *guard) checkPost(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return ErrCSRF
		}
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return ErrCSRF
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return ErrCSRF
	}
	if err := r.ParseForm(); err != nil {
		return ErrCSRF
	}
	want := g.token(c.Value)
	if !hmac.Equal([]byte(r.PostForm.Get(csrfField)), []byte(want)) {
		return ErrCSRF
	}
	return nil
}

// NewToken returns a random access token (32 bytes, base64url).
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("ui: no randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// authorized lets a request through that carries the access token: as
// the login cookie, as "Authorization: Bearer <token>", or as the password
// of basic auth (any user name). A GET with ?token=<token> (the address
// printed at start) sets the login cookie and redirects to the same page
// without the token, so it stays out of the history and the logs. Any
// other request gets 401 and a basic-auth challenge. It writes the answer
// itself when it returns false.
func (g *guard) authorized(w http.ResponseWriter, r *http.Request) bool {
	if c, err := r.Cookie(authCookie); err == nil && hmac.Equal([]byte(c.Value), []byte(g.loginCookie())) {
		return true
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && g.isToken(v) {
		return true
	}
	if _, pw, ok := r.BasicAuth(); ok && g.isToken(pw) {
		return true
	}
	q := r.URL.Query()
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && q.Has(tokenParam) && g.isToken(q.Get(tokenParam)) {
		http.SetCookie(w, &http.Cookie{
			Name: authCookie, Value: g.loginCookie(), Path: "/", HttpOnly: true, Secure: r.TLS != nil,
			SameSite: http.SameSiteStrictMode,
		})
		q.Del(tokenParam)
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return false
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="jetfleet dashboard", charset="UTF-8"`)
	http.Error(w, ErrUnauthorized.Error(), http.StatusUnauthorized)
	return false
}

// isToken compares v with the access token in constant time.
func (g *guard) isToken(v string) bool {
	return hmac.Equal([]byte(v), []byte(g.access))
}

// loginCookie is the login cookie's value: an HMAC of the token under the
// start's key, so the cookie is not the token and dies with the process.
func (g *guard) loginCookie() string {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte("login:" + g.access))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
