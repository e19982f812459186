package jobrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Inputs (docs/security.md). A submission may name its items' input in
// two ways only:
//
//   - objstore://<prefix>_uploads/<name>: an object the submitter uploaded.
//     When the coordinator accepts the job it copies the object into the
//     inputs bucket, which only it writes, checking input_digest when the
//     spec gives one, and the job reads the copy from then on: nothing a
//     submitter does to the uploads bucket later changes a job's items.
//   - a file in the coordinator's input directory (Config.InputDir), named
//     relative to it: file://items.json or items.json. Without an input
//     directory file inputs are refused; absolute paths and ".." always are,
//     before the filesystem is touched, with an error that says nothing
//     about what exists where.

// checkInput returns the problems of spec's input reference, if any. It
// reads nothing.
func (c *Coordinator) checkInput(spec *messages.JobSpec) []messages.FieldError {
	ref := spec.Input
	if ref == "" || setupLeavesInput(spec) {
		return nil // none, or what the setup leaves on an agent (setup.go)
	}
	bad := func(format string, args ...any) []messages.FieldError {
		return []messages.FieldError{{Field: "input", Message: fmt.Sprintf(format, args...)}}
	}
	uploads := c.names.UploadsBucket()
	switch {
	case strings.HasPrefix(ref, expand.ObjectStoreScheme):
		bucket, name, err := expand.ParseObjectRef(ref)
		if err != nil {
			return bad("%v", err)
		}
		if bucket != uploads {
			return bad("objstore inputs must be uploaded to the %s bucket (fleetctl submit uploads a local file there), not %q", uploads, bucket)
		}
		if strings.HasSuffix(name, "/") {
			return bad("object name %q ends with /", name)
		}
	case expand.IsFileRef(ref):
		if c.cfg.InputDir == "" {
			return bad("file inputs are not enabled on this coordinator (it has no input directory): upload the file to the %s bucket (fleetctl submit does) or list the items inline", uploads)
		}
		if err := expand.CheckFilePath(strings.TrimPrefix(ref, expand.FileScheme)); err != nil {
			return bad("%v", err)
		}
	default:
		return bad("unsupported scheme: use objstore://%s/<name> (fleetctl submit uploads a local file) or a file in the coordinator's input directory", uploads)
	}
	return nil
}

// adoptInput copies an uploaded input into the inputs bucket and points
// spec at the copy. A problem with the upload (missing, a digest that is
// not input_digest) comes back as field errors; an error means NATS
// trouble, worth retrying.
func (c *Coordinator) adoptInput(ctx context.Context, spec *messages.JobSpec) ([]messages.FieldError, error) {
	if !strings.HasPrefix(spec.Input, expand.ObjectStoreScheme) {
		return nil, nil
	}
	_, name, err := expand.ParseObjectRef(spec.Input)
	if err != nil {
		return []messages.FieldError{{Field: "input", Message: err.Error()}}, nil
	}
	uploads := c.names.UploadsBucket()
	src, err := expand.ObjectStoreOpener(c.js)(ctx, spec.Input)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return []messages.FieldError{{Field: "input", Message: fmt.Sprintf("no object %q in the %s bucket: upload it first (fleetctl submit does)", name, uploads)}}, nil
	case err != nil:
		return nil, err
	}
	defer src.Close()
	dst, err := c.js.ObjectStore(ctx, c.names.InputsBucket())
	if err != nil {
		return nil, err
	}
	copyName := "input/" + spec.ID + "/" + path.Base(name)
	rd := &readErr{r: src}
	info, err := dst.Put(ctx, jetstream.ObjectMeta{Name: copyName, Description: "input of job " + spec.ID + ", copied from " + uploads + "/" + name}, rd)
	if rd.err != nil && !errors.Is(rd.err, io.EOF) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The upload changed or vanished while it was read (its own digest
		// no longer matches its chunks).
		return []messages.FieldError{{Field: "input", Message: fmt.Sprintf("reading object %q of the %s bucket: %v", name, uploads, rd.err)}}, nil
	}
	if err != nil {
		return nil, err
	}
	if spec.InputDigest != "" && info.Digest != spec.InputDigest {
		_ = dst.Delete(ctx, copyName)
		return []messages.FieldError{{Field: "input_digest", Message: fmt.Sprintf(
			"object %q of the %s bucket has digest %s, not %s: it was replaced after it was uploaded; upload it again",
			name, uploads, info.Digest, spec.InputDigest)}}, nil
	}
	c.log.Info().Str("job_id", spec.ID).Str("upload", name).Str("digest", info.Digest).Uint64("bytes", info.Size).Msg("input copied from the uploads bucket")
	spec.Input = expand.ObjectStoreScheme + c.names.InputsBucket() + "/" + copyName
	spec.InputDigest = info.Digest
	return nil, nil
}

// dropUpload deletes an adopted upload (its job has its own copy). A
// failure only leaves it for the bucket's TTL.
func (c *Coordinator) dropUpload(ctx context.Context, ref string) {
	bucket, name, err := expand.ParseObjectRef(ref)
	if err != nil || bucket != c.names.UploadsBucket() {
		return
	}
	// The uploads bucket refuses rollups (submitters write it), which
	// nats.go's Delete sends: the upload is purged instead.
	if err := upload.Remove(ctx, c.js, bucket, name); err != nil {
		c.log.Debug().Err(err).Str("upload", name).Msg("upload not deleted; the bucket's TTL removes it")
	}
}

// readErr remembers the error its reader returned, so that a failed copy
// can be told from a failed write.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil {
		r.err = err
	}
	return n, err
}
