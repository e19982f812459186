// Package natsconn builds NATS connections for jetfleet's binaries from the
// common flags: server URL, credentials and TLS files.
package natsconn

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Options are the connection settings shared by every binary.
type Options struct {
	// URL of the server(s), comma-separated. Empty = none (callers may
	// start an embedded server).
	URL string
	// Creds is a NATS credentials file (JWT + nkey seed).
	Creds string
	// NKey is an nkey seed file.
	NKey string
	// User and Password for user/password auth.
	User, Password string
	// Token for token auth.
	Token string
	// UserJWT and UserSeed: a user's JWT and nkey seed, inline (from a
	// NATS context; there are no flags for them).
	UserJWT, UserSeed string
	// TLSFirst does the TLS handshake before the server's INFO.
	TLSFirst bool
	// Context names the NATS context (the nats CLI's, `nats context save`)
	// that ApplyContext reads.
	Context string
	// TLS client certificate, key and CA files.
	TLSCert, TLSKey, TLSCA string
	// InboxPrefix is where the connection receives replies and pulled
	// messages. Empty: InboxPrefix of the --nkey's public key when an
	// nkey is given (each user of `fleetctl auth init` may subscribe to
	// its own only), nats.go's _INBOX otherwise.
	InboxPrefix string
	// Name of the connection, shown by the server.
	Name string
	// JSDomain is the JetStream domain of the fleet's streams: the hub's
	// `jetstream { domain: … }` for a client behind a leaf node. Empty:
	// the JetStream of the server connected to. See JetStream.
	JSDomain string
	// OnAsyncError, when set, receives the connection's asynchronous errors
	// instead of nats.go's default print to stderr. A permission violation
	// arrives only here (the denied request itself just times out): see
	// IsPermissionViolation.
	OnAsyncError func(error)
}

// IsPermissionViolation reports whether err is the server refusing a
// publish or subscribe the user's permissions do not allow.
func IsPermissionViolation(err error) bool { return errors.Is(err, nats.ErrPermissionViolation) }

// deniedPublish starts the server's text for a refused publish, which
// names the subject Go-quoted: Permissions Violation for Publish to "x".
const deniedPublish = "Permissions Violation for Publish to "

// DeniedPublish returns the subject of a publish the server refused for
// want of permission; ok is false for any other error. The subject is only
// in the error's text: nats.go has no sentinel or field for it and passes
// the server's text on, wrapped in nats.ErrPermissionViolation (it reads
// the subject of a refused subscription out of that text the same way).
// This is the one place jetfleet reads an error's text.
func DeniedPublish(err error) (subject string, ok bool) {
	if !IsPermissionViolation(err) {
		return "", false
	}
	text := err.Error()
	i := strings.Index(text, deniedPublish)
	if i < 0 {
		return "", false
	}
	quoted, qerr := strconv.QuotedPrefix(text[i+len(deniedPublish):])
	if qerr != nil {
		return "", false
	}
	subject, qerr = strconv.Unquote(quoted)
	return subject, qerr == nil
}

// InboxPrefix is the inbox prefix of the user whose nkey is userKey: the
// only inboxes the permissions of `fleetctl auth init` let that user
// subscribe to, so that no user reads another's replies.
func InboxPrefix(userKey string) string { return "_INBOX." + userKey }

// InboxPrefixOfSeedFile is InboxPrefix of the public key of the nkey seed
// in path.
func InboxPrefixOfSeedFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	return InboxPrefix(pub), nil
}

// Register adds --context, --server, --creds, --nkey, --user, --password,
// --inbox-prefix, --js-domain and the TLS flags to fs, with defaults from
// getenv (NATS_CONTEXT, NATS_URL, NATS_CREDS, NATS_NKEY, NATS_USER,
// NATS_PASSWORD, NATS_INBOX_PREFIX, FLEET_JS_DOMAIN, NATS_TLS_CERT,
// NATS_TLS_KEY, NATS_TLS_CA). A context is read by
// ApplyContext, after parsing.
func (o *Options) Register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&o.Context, "context", getenv("NATS_CONTEXT"), "NATS context (the nats CLI's `nats context save`) to connect with; the flags override its fields (env NATS_CONTEXT)")
	fs.StringVar(&o.URL, "server", getenv("NATS_URL"), "NATS server URL(s), comma-separated (env NATS_URL)")
	fs.StringVar(&o.Creds, "creds", getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&o.NKey, "nkey", getenv("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&o.User, "user", getenv("NATS_USER"), "NATS user (env NATS_USER)")
	fs.StringVar(&o.Password, "password", getenv("NATS_PASSWORD"), "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&o.InboxPrefix, "inbox-prefix", getenv("NATS_INBOX_PREFIX"), "subject prefix of this client's replies (default: _INBOX.<public key> with --nkey, _INBOX otherwise; env NATS_INBOX_PREFIX)")
	fs.StringVar(&o.TLSCert, "tls-cert", getenv("NATS_TLS_CERT"), "TLS client certificate file, for servers that verify clients (env NATS_TLS_CERT)")
	fs.StringVar(&o.TLSKey, "tls-key", getenv("NATS_TLS_KEY"), "TLS client key file (env NATS_TLS_KEY)")
	fs.StringVar(&o.JSDomain, "js-domain", getenv(DomainEnv), "JetStream domain of the fleet's streams: the hub's, for a client connected to a leaf node (env "+DomainEnv+")")
	fs.StringVar(&o.TLSCA, "tls-ca", getenv("NATS_TLS_CA"), "CA file to verify the server's TLS certificate; turns TLS on (env NATS_TLS_CA)")
}

// Connect connects to o.URL (or url when o.URL is empty), reconnecting
// forever once connected.
func (o Options) Connect(url string) (*nats.Conn, error) {
	if o.URL != "" {
		url = o.URL
	}
	if url == "" {
		return nil, errors.New("natsconn: no server URL (use --server, NATS_URL or --context)")
	}
	if err := ValidDomain(o.JSDomain); err != nil {
		return nil, fmt.Errorf("%s: %w", DomainFlag, err)
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	inbox := o.InboxPrefix
	if o.NKey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			return nil, fmt.Errorf("natsconn: --nkey: %w", err)
		}
		opts = append(opts, opt)
		if inbox == "" {
			if inbox, err = InboxPrefixOfSeedFile(o.NKey); err != nil {
				return nil, fmt.Errorf("natsconn: --nkey: %w", err)
			}
		}
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.UserJWT != "" {
		opts = append(opts, nats.UserJWTAndSeed(o.UserJWT, o.UserSeed))
	}
	if o.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		if o.TLSCert == "" || o.TLSKey == "" {
			return nil, errors.New("natsconn: --tls-cert and --tls-key go together")
		}
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.OnAsyncError != nil {
		cb := o.OnAsyncError
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				err = fmt.Errorf("%w (subscription %q)", err, sub.Subject)
			}
			cb(err)
		}))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect %s: %w", url, err)
	}
	return nc, nil
}

// Pull options shared by the long-lived pull loops (the coordinator's
// intake, the agents' work). nats.go's defaults (30s expiry, 15s
// heartbeat) notice a lost pull request only after two missed heartbeats:
// 30s. A pull is lost when it reaches a consumer with no leader yet (a new
// R3 consumer) or a node that dies holding it; with these, the client
// notices within 4s and pulls again.
const (
	PullExpiry    = 10 * time.Second
	PullHeartbeat = 2 * time.Second
)

// PullBytes bounds what one pull asks the server for where messages can be
// as large as max_payload (results, dead-letter entries): a pull of N such
// messages lets the server queue N MiB for the client, and past 64 MiB
// pending the server (or nats.go) cuts it as a slow consumer. Use
// jetstream.PullMaxBytes(PullBytes), never a count, there.
const PullBytes = 8 << 20

// PullOptions are the options for Consumer.Messages: prefetch up to max
// messages, with PullExpiry and PullHeartbeat.
func PullOptions(max int) []jetstream.PullMessagesOpt {
	return []jetstream.PullMessagesOpt{
		jetstream.PullMaxMessages(max),
		jetstream.PullExpiry(PullExpiry),
		jetstream.PullHeartbeat(PullHeartbeat),
	}
}
