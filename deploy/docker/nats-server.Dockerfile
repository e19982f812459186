# nats-server built from the Go module go.mod pins (scripts/images.sh),
# statically, in an empty image: nothing is pulled.
FROM scratch
COPY nats-server /nats-server
COPY tmp/ /tmp/
EXPOSE 4222 6222 8222
VOLUME /data
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/nats.conf"]
