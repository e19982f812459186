package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
	nc       *nats.Conn
	names    messages.Names
	tr       tracing.Tracer
	failover bool
	team     string // WithTeam

	mu    sync.Mutex
	moved time.Time // the last move to another server (failover)
}

// Option configures a Client.
type Option func(*Client)

// WithClientTracerProvider makes Submit record a span (jetfleet.submit)
// with tp, the root of the job's trace or a child of ctx's span. Without
// it, a span in ctx is still passed on to the coordinator.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Client) { c.tr = tracing.New(tp) }
}

// WithTeam makes every call on team's API subjects
// (messages.Names.TeamAPISubject), as a fleet shared by teams requires of
// a team's submitters (fleetctl auth init --teams): jobs are submitted for
// the team, and only the team's jobs and dead letters are seen. JobWait
// then reads the status every second instead of following the job's
// events, which a team's key may not hear.
func WithTeam(team string) Option {
	return func(c *Client) { c.team = team }
}

// NewClient returns a client for the fleet under prefix ("" = "fleet").
func New(nc *nats.Conn, prefix string, opts ...Option) (*Client, error) {
	names, err := messages.NewNames(prefix)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, names: names}
	for _, o := range opts {
		o(c)
	}
	if c.team != "" {
		if err := messages.ValidToken(c.team); err != nil {
			return nil, fmt.Errorf("client: team %q: %w", c.team, err)
		}
	}
	return c, nil
}

// ErrNoCoordinator is returned when no coordinator answers a request.
var ErrNoCoordinator = errors.New("client: no coordinator answered (is one running with this --prefix?)")

// Call sends req (marshalled to JSON, or sent as is when it is []byte) to
// endpoint and decodes the reply into reply. An API error reply is returned
// as a *messages.APIError. A request that finds no coordinator serving is
// sent again for NoCoordinatorWait within ctx; one that reached a
// coordinator is never sent twice.
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
	// A call may be a change (a cancel, a pause): it is sent again only
	// when no coordinator got it (ask, asking.once).
	msg, err := c.ask(ctx, endpoint, data, asking{first: neverResend, once: true})
	if err != nil {
		return err
	}
	return decodeReply(endpoint, msg, reply)
}

// errNoCoordinator is ErrNoCoordinator and still nats.ErrNoResponders: on
// a server cut off the cluster that is what every request gets
// (natsconn.ClusterLoss).
var errNoCoordinator = fmt.Errorf("%w (%w)", ErrNoCoordinator, nats.ErrNoResponders)

// decodeReply decodes an answer of endpoint into reply; an API error
// reply is returned as a *messages.APIError.
func decodeReply(endpoint string, msg *nats.Msg, reply any) error {
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
		return fmt.Errorf("client: %s: bad reply: %w", endpoint, err)
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

// JobSubmit submits a spec (JSON) and returns the reply.
// The request carries ctx's trace context: the job's spans join the
// caller's trace (and a span of its own, with WithClientTracerProvider).
func (c *Client) JobSubmit(ctx context.Context, specJSON []byte) (*messages.SubmitReply, error) {
	ctx, span := c.tr.Start(ctx, tracing.SpanSubmit, trace.SpanKindClient)
	r, err := c.submit(ctx, specJSON)
	if span.IsRecording() {
		if r != nil {
			span.SetAttributes(tracing.AttrJobID.String(r.JobID), tracing.AttrExisting.Bool(r.Existing))
		}
		tracing.Fail(span, err)
		span.End()
	}
	return r, err
}

// JobStatus returns a job's status. An attempt that is not answered within
// ReadAttempt is sent again, to every coordinator (the first answer to any
// attempt wins), until ctx ends.
func (c *Client) JobStatus(ctx context.Context, id string) (*messages.JobStatus, error) {
	r, err := readCall[messages.StatusReply](ctx, c, messages.EndpointJobsStatus, messages.JobRequest{JobID: id})
	if err != nil {
		return nil, err
	}
	if r.Status == nil {
		return nil, fmt.Errorf("client: empty status for %s", id)
	}
	return r.Status, nil
}

// JobList returns the first page of the jobs req selects, newest first.
func (c *Client) JobList(ctx context.Context, req messages.ListRequest) ([]messages.JobStatus, error) {
	r, err := c.JobListPage(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.Jobs, nil
}

// JobListPage returns one page of job summaries (jobs.list); when the reply's
// NextCursor is set, req.Cursor = NextCursor asks for the next.
func (c *Client) JobListPage(ctx context.Context, req messages.ListRequest) (*messages.ListReply, error) {
	return call[messages.ListReply](ctx, c, messages.EndpointJobsList, req)
}

// JobCancel cancels a running job (jobs.cancel): its running steps finish,
// or with WithKill are terminated on every agent.
func (c *Client) JobCancel(ctx context.Context, id string, opts ...CancelOption) (*messages.JobStatus, error) {
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

// CancelOption changes what [Client.JobCancel] does.
type CancelOption func(*messages.CancelRequest)

// WithKill makes a cancel terminate the job's running steps on every agent
// instead of letting them finish (messages.CancelRequest.Kill).
func WithKill() CancelOption {
	return func(r *messages.CancelRequest) { r.Kill = true }
}

// JobPrune deletes the records and what is left of the data of jobs that
// finished at least req.OlderThan ago (unset: the coordinator's job
// retention); with req.DryRun it only lists them.
func (c *Client) JobPrune(ctx context.Context, req messages.PruneRequest) (*messages.PruneReply, error) {
	return call[messages.PruneReply](ctx, c, messages.EndpointJobsPrune, req)
}

// older reports whether status a is older than b: both say when their
// counts were true (JobStatus.AsOf) and a's is earlier. A status without
// AsOf (a coordinator older than it) is never older.
func older(a, b *messages.JobStatus) bool {
	return a != nil && b != nil && a.AsOf != nil && b.AsOf != nil && a.AsOf.Before(*b.AsOf)
}
