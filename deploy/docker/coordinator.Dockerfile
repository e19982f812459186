# The jetfleet coordinator, a static binary (scripts/images.sh) in an empty image.
FROM scratch
COPY coordinator /coordinator
COPY tmp/ /tmp/
EXPOSE 9090
ENTRYPOINT ["/coordinator"]
