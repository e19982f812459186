package expand

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Opener opens the input a spec names. It may be called more than once for
// the same ref (Count, then Open, and to confirm a duplicate id), and must
// return the same content each time.
type Opener func(ctx context.Context, ref string) (io.ReadCloser, error)

// Reference schemes understood by NewOpener.
const (
	ObjectStoreScheme = "objstore://"
	FileScheme        = "file://"
)

// FileOpener opens refs as file paths (an optional file:// prefix is
// removed); relative paths resolve against baseDir. Absolute paths are
// opened as they are: a coordinator that accepts specs from untrusted
// clients should not serve file inputs with it.
func FileOpener(baseDir string) Opener {
	return func(_ context.Context, ref string) (io.ReadCloser, error) {
		p := strings.TrimPrefix(ref, FileScheme)
		if p == "" {
			return nil, errorf(ErrRef, "empty file path")
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		return os.Open(p)
	}
}

// NewOpener dispatches on the ref's scheme: objstore://bucket/name to
// ObjectStoreOpener(js) (an error when js is nil), file:// and plain paths
// to FileOpener(baseDir), any other scheme to an ErrRef error.
func NewOpener(baseDir string, js jetstream.JetStream) Opener {
	files := FileOpener(baseDir)
	var objects Opener
	if js != nil {
		objects = ObjectStoreOpener(js)
	}
	return func(ctx context.Context, ref string) (io.ReadCloser, error) {
		switch {
		case strings.HasPrefix(ref, ObjectStoreScheme):
			if objects == nil {
				return nil, errorf(ErrRef, "object store inputs need a JetStream connection")
			}
			return objects(ctx, ref)
		case strings.HasPrefix(ref, FileScheme) || !hasScheme(ref):
			return files(ctx, ref)
		}
		return nil, errorf(ErrRef, "unsupported scheme (use a file path, %sbucket/name or %spath)", ObjectStoreScheme, FileScheme)
	}
}

// hasScheme reports whether ref starts with "<scheme>://", a scheme being
// two or more letters, digits, '+', '-' or '.' starting with a letter.
func hasScheme(ref string) bool {
	i := strings.Index(ref, "://")
	if i < 2 {
		return false
	}
	for j, c := range ref[:i] {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case j > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// ParseObjectRef splits "objstore://<bucket>/<name>"; the name may contain
// slashes.
func ParseObjectRef(ref string) (bucket, name string, err error) {
	rest, ok := strings.CutPrefix(ref, ObjectStoreScheme)
	if !ok {
		return "", "", errorf(ErrRef, "%q is not an object store reference (%s<bucket>/<name>)", ref, ObjectStoreScheme)
	}
	bucket, name, _ = strings.Cut(rest, "/")
	if bucket == "" || name == "" {
		return "", "", errorf(ErrRef, "%q: want %s<bucket>/<name>", ref, ObjectStoreScheme)
	}
	return bucket, name, nil
}
