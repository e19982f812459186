// Package deploy holds the deployment files: images (docker/), the NATS
// cluster's configuration (nats/), Prometheus and Grafana (prometheus/,
// grafana/). It has no code; its tests check those files against the
// code: the compose file against the auth files, the node configuration
// against nats-server, and every metric the dashboard queries against the
// registries the binaries build.
package deploy
