package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetfleet/jetfleet/internal/tracing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Client calls the jetfleet API (the coordinator's micro service) over
// NATS. It is what fleetctl uses; the nats CLI can make the same requests.
// Safe for concurrent use.
type Client struct {
	nc    *nats.Conn
	names messages.Names
	tr    tracing.Tracer
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithClientTracerProvider makes Submit record a span (jetfleet.submit)
// with tp, the root of the job's trace or a child of ctx's span. Without
// it, a span in ctx is still passed on to the coordinator.
func WithClientTracerProvider(tp trace.TracerProvider) ClientOption {
	return func(c *Client) { c.tr = tracing.New(tp) }
}

// NewClient returns a client for the fleet under prefix ("" = "fleet").
func NewClient(nc *nats.Conn, prefix string, opts ...ClientOption) (*Client, error) {
	names, err := messages.NewNames(prefix)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, names: names}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// ErrNoCoordinator is returned when no coordinator answers a request.
var ErrNoCoordinator = errors.New("coordinator: no coordinator answered (is one running with this --prefix?)")

// Call sends req (marshalled to JSON, or sent as is when it is []byte) to
// endpoint and decodes the reply into reply. An API error reply is returned
// as a *messages.APIError.
func (c *Client) Call(ctx context.Context, endpoint string, req, reply any) error {
	var data []byte
	switch r := req.(type) {
	case []byte:
		data = r
	case nil:
	default:
		var err error
		if data, err = json.Marshal(req); err != nil {
			return err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	// The request carries ctx's trace context (W3C headers), if any.
	req0 := nats.NewMsg(c.names.APISubject(endpoint))
	req0.Data = data
	tracing.Inject(ctx, req0.Header)
	msg, err := c.nc.RequestMsgWithContext(ctx, req0)
	if errors.Is(err, nats.ErrNoResponders) {
		// Still nats.ErrNoResponders too: on a server cut off the cluster
		// that is what every request gets (natsconn.ClusterLoss).
		return fmt.Errorf("%w (%w)", ErrNoCoordinator, nats.ErrNoResponders)
	}
	if err != nil {
		return fmt.Errorf("coordinator: %s: %w", endpoint, err)
	}
	var er messages.ErrorReply
	if err := json.Unmarshal(msg.Data, &er); err == nil && er.Error != nil {
		return er.Error
	}
	if msg.Header.Get("Nats-Service-Error-Code") != "" {
		return &messages.APIError{Code: messages.CodeInternal, Message: msg.Header.Get("Nats-Service-Error")}
	}
	if reply == nil {
		return nil
	}
	if err := json.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("coordinator: %s: bad reply: %w", endpoint, err)
	}
	return nil
}

// call sends req to endpoint and decodes the reply into a new R.
func call[R any](ctx context.Context, c *Client, endpoint string, req any) (*R, error) {
	var r R
	if err := c.Call(ctx, endpoint, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Submit submits a spec (JSON) and returns the reply.
// The request carries ctx's trace context: the job's spans join the
// caller's trace (and a span of its own, with WithClientTracerProvider).
func (c *Client) Submit(ctx context.Context, specJSON []byte) (*messages.SubmitReply, error) {
	ctx, span := c.tr.Start(ctx, tracing.SpanSubmit, trace.SpanKindClient)
	r, err := call[messages.SubmitReply](ctx, c, messages.EndpointJobsSubmit, specJSON)
	if span.IsRecording() {
		if r != nil {
			span.SetAttributes(tracing.AttrJobID.String(r.JobID), tracing.AttrExisting.Bool(r.Existing))
		}
		tracing.Fail(span, err)
		span.End()
	}
	return r, err
}

// ReadAttempt bounds the first attempt of a read request (Status): a
// coordinator that has not answered by then (paused, or behind a server
// cut off the cluster) is left, and the request is sent again, to
// whichever coordinator the queue group picks. Each attempt may take twice
// as long as the one before, so a coordinator that is only slow answers
// one. Reads are idempotent.
const ReadAttempt = 750 * time.Millisecond

// readCall is call for a read: attempts of ReadAttempt, doubling, each at
// most what is left of ctx, until one is answered, an API error other than
// "unavailable" comes back, or ctx ends.
func readCall[R any](ctx context.Context, c *Client, endpoint string, req any) (*R, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	idle := 0 // attempts that found no coordinator serving
	for attempt := ReadAttempt; ; attempt = min(2*attempt, time.Minute) {
		actx, cancel := context.WithTimeout(ctx, attempt)
		r, err := call[R](actx, c, endpoint, req)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		cancel()
		var ae *messages.APIError
		unavailable := errors.As(err, &ae) && ae.Code == messages.CodeUnavailable
		switch {
		case err == nil:
			return r, nil
		case ctx.Err() != nil:
			return nil, err
		case timedOut:
			// Not answered in time: ask again at once.
		case errors.Is(err, ErrNoCoordinator) && idle >= 5:
			return nil, err // none runs, most likely: say so
		case errors.Is(err, ErrNoCoordinator) || unavailable:
			// None serves now (one stopped serving while it cannot reach
			// the cluster, another takes over), or this one is busy: a
			// moment before the next.
			if !unavailable {
				idle++
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(100 * time.Millisecond):
			}
		default:
			return nil, err
		}
	}
}

// Status returns a job's status. An attempt that is not answered within
// ReadAttempt is sent again (another coordinator may answer) until ctx
// ends.
func (c *Client) Status(ctx context.Context, id string) (*messages.JobStatus, error) {
	r, err := readCall[messages.StatusReply](ctx, c, messages.EndpointJobsStatus, messages.JobRequest{JobID: id})
	if err != nil {
		return nil, err
	}
	if r.Status == nil {
		return nil, fmt.Errorf("coordinator: empty status for %s", id)
	}
	return r.Status, nil
}

// List returns the first page of the jobs req selects, newest first.
func (c *Client) List(ctx context.Context, req messages.ListRequest) ([]messages.JobStatus, error) {
	r, err := c.ListPage(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.Jobs, nil
}

// ListPage returns one page of job summaries (jobs.list); when the reply's
// NextCursor is set, req.Cursor = NextCursor asks for the next.
func (c *Client) ListPage(ctx context.Context, req messages.ListRequest) (*messages.ListReply, error) {
	return call[messages.ListReply](ctx, c, messages.EndpointJobsList, req)
}

// Cancel cancels a running job (jobs.cancel): its running steps finish,
// or with WithKill are terminated on every agent.
func (c *Client) Cancel(ctx context.Context, id string, opts ...CancelOption) (*messages.JobStatus, error) {
	req := messages.CancelRequest{JobID: id}
	for _, o := range opts {
		o(&req)
	}
	r, err := call[messages.StatusReply](ctx, c, messages.EndpointJobsCancel, req)
	if err != nil {
		return nil, err
	}
	return r.Status, nil
}

// Prune deletes the records and what is left of the data of jobs that
// finished at least req.OlderThan ago (unset: the coordinator's job
// retention); with req.DryRun it only lists them.
func (c *Client) Prune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error) {
	return call[messages.PruneReply](ctx, c, messages.EndpointJobsPrune, req)
}

// older reports whether status a is older than b: both say when their
// counts were true (JobStatus.AsOf) and a's is earlier. A status without
// AsOf (a coordinator older than it) is never older.
func older(a, b *messages.JobStatus) bool {
	return a != nil && b != nil && a.AsOf != nil && b.AsOf != nil && a.AsOf.Before(*b.AsOf)
}
