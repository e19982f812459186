package expand

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// FileOpener opens refs as local file paths (an optional file:// prefix is
// removed) for a caller that trusts the spec as much as its own files
// (fleetctl validate): relative paths resolve against baseDir, absolute
// ones are opened as they are. A coordinator serving remote submitters
// uses RootOpener through NewOpener instead.
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

// CheckFilePath checks the path of a file ref (file:// removed) before
// anything touches the filesystem: it must be relative, and must not step
// out of its directory with "..". Its errors wrap ErrRef and say nothing
// about what exists where.
func CheckFilePath(p string) error {
	switch {
	case p == "":
		return errorf(ErrRef, "empty file path")
	case filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`):
		return errorf(ErrRef, "absolute paths are not allowed; name a file relative to the coordinator's input directory")
	case slices.Contains(strings.FieldsFunc(filepath.ToSlash(p), func(r rune) bool { return r == '/' }), ".."):
		return errorf(ErrRef, `".." is not allowed; name a file inside the coordinator's input directory`)
	}
	return nil
}

// RootOpener opens file refs (an optional file:// prefix is removed)
// inside root and nowhere else: absolute paths and ".." are refused
// (CheckFilePath), and the file is opened with os.OpenInRoot, so no
// symbolic link leads out of root either. Errors name the ref as given,
// never root or what the filesystem said: a file that cannot be opened is
// "not found in the input directory", whatever the reason.
func RootOpener(root string) Opener {
	return func(_ context.Context, ref string) (io.ReadCloser, error) {
		p := strings.TrimPrefix(ref, FileScheme)
		if err := CheckFilePath(p); err != nil {
			return nil, err
		}
		f, err := os.OpenInRoot(root, p)
		if err != nil {
			return nil, errorf(ErrFileNotFound, "%q is not a readable file in the coordinator's input directory", p)
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			_ = f.Close()
			return nil, errorf(ErrFileNotFound, "%q is not a readable file in the coordinator's input directory", p)
		}
		return f, nil
	}
}

// NewOpener dispatches on the ref's scheme: objstore://bucket/name to
// ObjectStoreOpener(js) (an error when js is nil); file:// and plain paths
// to RootOpener(inputDir), or, when inputDir is empty, to an
// ErrFileInputsOff error; any other scheme to an ErrRef error.
func NewOpener(inputDir string, js jetstream.JetStream) Opener {
	files := func(context.Context, string) (io.ReadCloser, error) {
		return nil, errorf(ErrFileInputsOff, "file inputs are not enabled on this coordinator")
	}
	if inputDir != "" {
		files = RootOpener(inputDir)
	}
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
		case IsFileRef(ref):
			return files(ctx, ref)
		}
		return nil, errorf(ErrRef, "unsupported scheme (use a file path, %sbucket/name or %spath)", ObjectStoreScheme, FileScheme)
	}
}

// IsFileRef reports whether ref names a file: file://path or a plain path.
func IsFileRef(ref string) bool { return strings.HasPrefix(ref, FileScheme) || !hasScheme(ref) }

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
