package wire

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// URL templates (the http step's with.url, docs/limits.md "The http
// handler"): a value fills a path segment or a query value, escaped for
// where it lands (URLEscape), and never the scheme, the host or the port:
// those must be written out, with the '/', '?' or '#' that ends them,
// before the first reference.

// ErrURLTemplate is a URL template that a value could steer elsewhere.
var ErrURLTemplate = errors.New("wire: url template")

// URLOrigin checks the URL template t and returns the origin it names
// (scheme and host, with the port): the scheme must be http or https, and
// no reference may stand before the end of the host and port.
func URLOrigin(t Template) (*url.URL, error) {
	var prefix strings.Builder
	refs := false
	for _, p := range t.Parts {
		if p.Ref != nil {
			refs = true
			break
		}
		prefix.WriteString(p.Literal)
	}
	lit := prefix.String()
	scheme, rest, ok := strings.Cut(lit, "://")
	if !ok {
		if refs {
			return nil, fmt.Errorf("%w: %q: the scheme and host must be written out before any ${...} (such as https://api.example.com/${item.id})", ErrURLTemplate, t.Raw)
		}
		return nil, fmt.Errorf("%w: %q is not an http or https URL", ErrURLTemplate, t.Raw)
	}
	if s := strings.ToLower(scheme); s != "http" && s != "https" {
		return nil, fmt.Errorf("%w: %q: the scheme %q is not http or https", ErrURLTemplate, t.Raw, scheme)
	}
	end := strings.IndexAny(rest, "/?#")
	if refs && end < 0 {
		return nil, fmt.Errorf("%w: %q: a value may not stand in the host or port: end them with '/', '?' or '#' before the first ${...}", ErrURLTemplate, t.Raw)
	}
	authority := rest
	if end >= 0 {
		authority = rest[:end]
	}
	u, err := url.Parse(scheme + "://" + authority)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrURLTemplate, t.Raw, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %q: no host", ErrURLTemplate, t.Raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: %q: user information in the URL is not allowed (send credentials in headers)", ErrURLTemplate, t.Raw)
	}
	return u, nil
}

// RenderURL expands the URL template t, each value escaped for where it
// lands, and checks that the result keeps the origin the template names.
func RenderURL(t Template, v TemplateVars) (string, error) {
	origin, err := URLOrigin(t)
	if err != nil {
		return "", err
	}
	s, err := t.Render(v, URLEscape)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrURLTemplate, err)
	}
	if !strings.EqualFold(u.Scheme, origin.Scheme) || !strings.EqualFold(u.Host, origin.Host) || u.User != nil {
		return "", fmt.Errorf("%w: %q expanded to another origin than %s", ErrURLTemplate, t.Raw, origin)
	}
	return s, nil
}
