package natsconn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrDomain is the class of every error about a JetStream domain setting.
var ErrDomain = errors.New("natsconn: JetStream domain")

// DomainFlag and DomainEnv name the JetStream domain setting of every
// binary, for messages that tell the user what to check.
const (
	DomainFlag = "--js-domain"
	DomainEnv  = "FLEET_JS_DOMAIN"
)

// ValidDomain checks a JetStream domain: empty (the JetStream of the
// server the client is connected to, or of its cluster), or one subject
// token, as nats-server requires of `jetstream { domain: … }`.
func ValidDomain(domain string) error {
	if domain == "" {
		return nil
	}
	if strings.ContainsAny(domain, ".*> \t\r\n") {
		return fmt.Errorf("%w %q: a domain is one subject token (no '.', '*', '>' or white space)", ErrDomain, domain)
	}
	return nil
}

// JetStream returns a JetStream context on nc for domain: requests go to
// $JS.<domain>.API (nats.go's NewWithDomain), which a leaf node carries to
// the servers of that domain; an empty domain is the JetStream the
// connection's own server answers for ($JS.API). Everything built on the
// context (KV, object stores, direct gets, consumers, kvleader's raw
// requests) follows it; acks and publishes need no domain (they go to the
// subjects the stream's server listens on).
func JetStream(nc *nats.Conn, domain string, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	if err := ValidDomain(domain); err != nil {
		return nil, err
	}
	if domain == "" {
		return jetstream.New(nc, opts...)
	}
	return jetstream.NewWithDomain(nc, domain, opts...)
}

// APIPrefix is the JetStream API prefix of domain: "$JS.<domain>.API." or,
// for no domain, "$JS.API.".
func APIPrefix(domain string) string {
	if domain == "" {
		return jetstream.DefaultAPIPrefix
	}
	return "$JS." + domain + ".API."
}

// Unreachable reports whether err says that no JetStream answered at all
// (no responders on the API subject, or JetStream not enabled where the
// request went): what a wrong or missing domain gets through a leaf node,
// and what a server without JetStream gets.
func Unreachable(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrJetStreamNotEnabledForAccount)
}

// UnreachableHint says what to check when no JetStream answers on domain,
// naming the domain setting.
func UnreachableHint(domain string) string {
	if domain == "" {
		return "no JetStream answers on $JS.API: check that the server runs JetStream for this account, " +
			"or, behind a leaf node, set " + DomainFlag + " (env " + DomainEnv + ", or jetstream_domain in the NATS context) to the hub's JetStream domain"
	}
	return "no JetStream answers in domain " + domain + " ($JS." + domain + ".API): check " + DomainFlag +
		" (env " + DomainEnv + ", or jetstream_domain in the NATS context) against the hub's `jetstream { domain: … }`, and that the leaf node's link to the hub is up"
}
