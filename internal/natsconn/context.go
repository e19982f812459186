package natsconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrContext is the class of every error about a NATS context.
var ErrContext = errors.New("natsconn: NATS context")

// Context is a NATS context as the nats CLI saves it (`nats context save
// NAME`): a JSON file <config>/nats/context/NAME.json, where <config> is
// $XDG_CONFIG_HOME or ~/.config, and the selected context's name in
// <config>/nats/context.txt. These are the fields of that format; jetfleet
// uses the connection settings and the JetStream domain, ignores the
// cosmetic ones (description, color_scheme) and those only the nats CLI
// uses (the JetStream event prefix), and refuses a context that sets one it cannot honour, naming
// the field (see unsupported).
type Context struct {
	Description string `json:"description"`
	URL         string `json:"url"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Token       string `json:"token"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	InboxPrefix string `json:"inbox_prefix"`
	UserJWT     string `json:"user_jwt"`
	UserSeed    string `json:"user_seed"`
	TLSFirst    bool   `json:"tls_first"`

	ColorScheme   string `json:"color_scheme"`
	JSEventPrefix string `json:"jetstream_event_prefix"`

	NSC              string   `json:"nsc"`
	SocksProxy       string   `json:"socks_proxy"`
	JSDomain         string   `json:"jetstream_domain"`
	JSAPIPrefix      string   `json:"jetstream_api_prefix"`
	WinCertStore     string   `json:"windows_cert_store"`
	WinCertMatchBy   string   `json:"windows_cert_match_by"`
	WinCertMatch     string   `json:"windows_cert_match"`
	WinCertCAMatches []string `json:"windows_ca_certs_match"`
}

// unsupported names the first field set in c that jetfleet cannot honour:
// connecting without it would reach another server or account than the
// user meant, or fail later with a less clear error.
func (c *Context) unsupported() string {
	switch {
	case c.NSC != "":
		return "nsc"
	case c.SocksProxy != "":
		return "socks_proxy"
	case c.JSAPIPrefix != "":
		return "jetstream_api_prefix"
	case c.WinCertStore != "" || c.WinCertMatchBy != "" || c.WinCertMatch != "" || len(c.WinCertCAMatches) > 0:
		return "windows_cert_store"
	}
	return ""
}

// configRoot is $XDG_CONFIG_HOME, or $HOME/.config, as the nats CLI uses.
func configRoot(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return x, nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("%w: no XDG_CONFIG_HOME or home directory: %v", ErrContext, err)
		}
	}
	return filepath.Join(home, ".config"), nil
}

// validContextName refuses names that would leave the context directory,
// as the nats CLI does.
func validContextName(name string) error {
	if strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("%w: --context %q: a name may not hold \"..\", \"/\" or \"\\\"", ErrContext, name)
	}
	return nil
}

// SelectedContext returns the name of the context `nats context select`
// chose (context.txt), or "" when none is.
func SelectedContext(getenv func(string) string) (string, error) {
	root, err := configRoot(getenv)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(root, "nats", "context.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: selected context: %v", ErrContext, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// LoadContext reads the context named name. Paths in creds, nkey, cert,
// key and ca have environment variables and a leading ~ expanded, as the
// nats CLI does; a file:// reference is a path; env://VAR in password,
// token, user_jwt and user_seed is the variable's value.
func LoadContext(name string, getenv func(string) string) (*Context, error) {
	if err := validContextName(name); err != nil {
		return nil, err
	}
	root, err := configRoot(getenv)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "nats", "context", name+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: --context %q: no file %s (create it with `nats context save %s --server URL`)", ErrContext, name, path, name)
		}
		return nil, fmt.Errorf("%w: --context %q: %v", ErrContext, name, err)
	}
	var c Context
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: --context %q: %s: %v", ErrContext, name, path, err)
	}
	if f := c.unsupported(); f != "" {
		return nil, fmt.Errorf("%w: --context %q: field %s is not supported by jetfleet", ErrContext, name, f)
	}
	if err := ValidDomain(c.JSDomain); err != nil {
		return nil, fmt.Errorf("%w: --context %q: field jetstream_domain: %w", ErrContext, name, err)
	}
	home := getenv("HOME")
	expandPath := func(field string, p *string) error {
		v, err := reference(field, *p, false, getenv)
		if err != nil {
			return fmt.Errorf("%w: --context %q: %v", ErrContext, name, err)
		}
		v = os.Expand(v, getenv)
		if strings.HasPrefix(v, "~") && home != "" {
			v = home + v[1:]
		}
		*p = v
		return nil
	}
	literal := func(field string, p *string) error {
		v, err := reference(field, *p, true, getenv)
		if err != nil {
			return fmt.Errorf("%w: --context %q: %v", ErrContext, name, err)
		}
		*p = v
		return nil
	}
	for _, f := range []struct {
		field string
		p     *string
		path  bool
	}{
		{"creds", &c.Creds, true}, {"nkey", &c.NKey, true}, {"cert", &c.Cert, true},
		{"key", &c.Key, true}, {"ca", &c.CA, true},
		{"password", &c.Password, false}, {"token", &c.Token, false},
		{"user_jwt", &c.UserJWT, false}, {"user_seed", &c.UserSeed, false},
	} {
		var err error
		if f.path {
			err = expandPath(f.field, f.p)
		} else {
			err = literal(f.field, f.p)
		}
		if err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// reference resolves a value that may be a reference: file:// (a path;
// for a literal, the file's contents) or env:// (a literal from the
// environment). Other schemes (op://, nsc://, …) need the nats CLI's
// resolvers and are refused with the field's name; a literal without a
// known scheme is itself.
func reference(field, v string, literal bool, getenv func(string) string) (string, error) {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok || strings.ContainsAny(scheme, " \t/") {
		return v, nil
	}
	switch strings.ToLower(scheme) {
	case "file":
		if !literal {
			return rest, nil
		}
		data, err := os.ReadFile(rest)
		if err != nil {
			return "", fmt.Errorf("field %s: %v", field, err)
		}
		return strings.TrimRight(string(data), "\r\n"), nil
	case "env":
		if !literal {
			return "", fmt.Errorf("field %s: env:// is for secrets, not files", field)
		}
		return getenv(rest), nil
	case "op", "nsc", "data":
		return "", fmt.Errorf("field %s: the %s:// scheme is not supported by jetfleet (give a file path or env://VAR)", field, scheme)
	}
	if literal {
		return v, nil // a password may hold "://"
	}
	return "", fmt.Errorf("field %s: the %s:// scheme is not supported by jetfleet", field, scheme)
}

// ApplyContext fills what the flags and NATS_* variables left empty from
// a NATS context: the one o.Context names (--context, env NATS_CONTEXT)
// or, when selected is true and neither a context nor a server was given,
// the one `nats context select` chose. Flags and variables override the
// context field by field; credentials of another kind replace the
// context's: when --creds, --nkey or a token is given, the context's user,
// password, creds, nkey and token are not used. TLS files are filled one
// by one.
func (o *Options) ApplyContext(getenv func(string) string, selected bool) error {
	name := o.Context
	if name == "" && selected && o.URL == "" {
		var err error
		if name, err = SelectedContext(getenv); err != nil {
			return err
		}
	}
	if name == "" {
		return nil
	}
	c, err := LoadContext(name, getenv)
	if err != nil {
		return err
	}
	fill := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	fill(&o.URL, c.URL)
	if o.Creds == "" && o.NKey == "" && o.Token == "" && o.UserJWT == "" {
		// One method, in the nats CLI's order; a token goes with any.
		// A --user or --password given alone completes the context's
		// user and password.
		switch {
		case c.User != "":
			fill(&o.User, c.User)
			fill(&o.Password, c.Password)
		case o.User != "" || o.Password != "":
		case c.Creds != "":
			o.Creds = c.Creds
		case c.NKey != "":
			o.NKey = c.NKey
		case c.UserJWT != "":
			o.UserJWT, o.UserSeed = c.UserJWT, c.UserSeed
		}
		o.Token = c.Token
	}
	fill(&o.TLSCert, c.Cert)
	fill(&o.TLSKey, c.Key)
	fill(&o.TLSCA, c.CA)
	fill(&o.InboxPrefix, c.InboxPrefix)
	fill(&o.JSDomain, c.JSDomain)
	o.TLSFirst = o.TLSFirst || c.TLSFirst
	return nil
}
