# The jetfleet agent, a static binary (scripts/images.sh) in an empty image,
# plus a static busybox (Debian's busybox-static) as /bin/sh and its applets
# (sleep, test, cat, ...) for shell steps. Add your own static tools the
# same way, or build FROM an image that has them.
FROM scratch
COPY agent /agent
COPY bin/ /bin/
COPY tmp/ /tmp/
ENV PATH=/bin
EXPOSE 9091
ENTRYPOINT ["/agent"]
