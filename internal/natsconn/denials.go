package natsconn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrDenied is the cause of a request the server refused for lack of
// permission (Denials.Request).
var ErrDenied = errors.New("natsconn: permission denied")

// Denials hears the permission violations the server reports on one
// connection. The server answers a publish it refuses with an
// asynchronous "-ERR 'Permissions Violation for Publish to "<subject>"'"
// and no reply: a request on a subject the user may not publish to
// otherwise waits for its whole timeout (docs/jetstream.md §15). Denials
// turns that error into an answer. Safe for concurrent use.
type Denials struct {
	nc      *nats.Conn
	mu      sync.Mutex
	waiters map[string][]chan struct{} // by subject
}

// permissionSubject finds the subject in a publish permission violation.
var permissionSubject = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

// WatchDenials installs a Denials on nc's asynchronous error handler,
// which it calls in turn: the handler in place keeps receiving every
// error. A handler set on nc afterwards replaces the Denials: set it
// before.
func WatchDenials(nc *nats.Conn) *Denials {
	d := &Denials{nc: nc, waiters: map[string][]chan struct{}{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		d.hear(err)
		if prev != nil {
			prev(c, s, err)
		}
	})
	return d
}

// hear wakes the requests waiting on the subject a permission violation
// names.
func (d *Denials) hear(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := permissionSubject.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	d.mu.Lock()
	ws := d.waiters[m[1]]
	delete(d.waiters, m[1])
	d.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

// wait registers a waiter for a violation on subject; forget removes it.
func (d *Denials) wait(subject string) (denied <-chan struct{}, forget func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	d.waiters[subject] = append(d.waiters[subject], ch)
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		ws := d.waiters[subject]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(d.waiters, subject)
		} else {
			d.waiters[subject] = ws
		}
	}
}

// Request sends data to subject and returns the reply, or an error
// wrapping ErrDenied as soon as the server says the user may not publish
// there, or ctx's error. A violation on the same subject by a concurrent
// publish of the connection also counts: permissions are per subject.
func (d *Denials) Request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	ctx, stop := d.Watch(ctx, subject)
	defer stop()
	reply, err := d.nc.RequestWithContext(ctx, subject, data)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrDenied) {
		return nil, cause
	}
	return reply, err
}

// Watch returns a context that ends, with a cause wrapping ErrDenied
// (context.Cause), as soon as the server refuses a publish to subject on
// the connection; stop releases it. For a publish through another API
// (a JetStream publish) that would otherwise wait for its whole timeout.
func (d *Denials) Watch(ctx context.Context, subject string) (context.Context, func()) {
	denied, forget := d.wait(subject)
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-denied:
			cancel(fmt.Errorf("%w: publish to %q", ErrDenied, subject))
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		forget()
		cancel(nil)
	}
}

// StreamPermitted reports whether the user may use stream: false only when
// the server refuses its info request (apiPrefix is the JetStream API's
// subject prefix, APIPrefix); its info, "not found" or ctx's end count as
// permitted, and the caller's own requests then say what they find. Role
// keys of an earlier release name fewer streams (docs/deploy.md,
// "Upgrades").
func (d *Denials) StreamPermitted(ctx context.Context, apiPrefix, stream string) bool {
	_, err := d.Request(ctx, apiPrefix+"STREAM.INFO."+stream, nil)
	return !errors.Is(err, ErrDenied)
}
