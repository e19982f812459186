# fleetctl, a static binary (scripts/images.sh) in an empty image.
FROM scratch
COPY fleetctl /fleetctl
COPY tmp/ /tmp/
ENTRYPOINT ["/fleetctl"]
