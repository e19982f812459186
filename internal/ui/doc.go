// Package ui is jetfleet's web dashboard: jobs with live progress, one
// job's counts, budget, histograms, errors and circuit breaker, the dead
// letters with their attempt timelines, dry runs, paced replays and
// purges, and the agents of each pool.
//
// It is a plain net/http server with html/template pages and a small
// embedded script; charts are SVG drawn on the server. It talks to the
// fleet only through the coordinator's API (the jetfleet micro service)
// and JetStream reads and watches, with the permissions of the NATS
// connection it is given: `fleetctl ui` runs it on any machine with an
// operator's credentials, and the coordinator can serve it with
// --ui-addr.
//
// Live updates are server-sent events fed by one watch of the jobs bucket,
// one subscription to the fleet's events and one watch of the agents
// bucket, shared by every browser; each browser has a bounded queue and
// is disconnected, not waited for, when it falls behind.
//
// Safe by default: it binds to loopback (another address needs
// Config.AllowRemote), answers only to localhost Host headers there,
// sends a strict Content-Security-Policy (no inline script or style),
// requires a CSRF token on every form post (HttpOnly SameSite=Strict
// session cookie, token = HMAC of the session), and Config.ReadOnly hides
// and refuses cancel, replay and purge. Every value from the fleet (item
// ids, payloads, error texts) is escaped by html/template.
package ui
