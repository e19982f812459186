// Package auth generates a fleet's least-privilege NATS authorization:
// one nkey user per role (coordinator, one agent user per pool, submitter,
// operator), the nats-server `accounts` include that grants each role the
// subjects its job needs and nothing else, and optionally a CA and a
// server certificate for TLS. `fleetctl auth init DIR` calls Init.
//
// How the roles map to subjects is in RolePermissions and docs/security.md
// (whose lists PermissionsMarkdown generates).
// The tests start an embedded server with the generated configuration and
// prove that each role can do its job and is refused the rest.
package auth
