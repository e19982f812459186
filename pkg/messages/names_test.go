package messages

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeItemIDBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		id       string
		reverses bool
	}{
		{"short", "img/01.jpg", true},
		{"any bytes", "a.b*>\x00 \xff", true},
		{"longest reversible: 96 bytes", strings.Repeat("x", 96), true},
		{"97 bytes: digest", strings.Repeat("x", 97), false},
		{"5000 bytes: digest", strings.Repeat("x", 5000), false},
		{"1 MB: digest", strings.Repeat("é", 1<<19), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := EncodeItemID(tc.id)
			if len(enc) > MaxEncodedItemID {
				t.Fatalf("encoding is %d bytes, want <= %d", len(enc), MaxEncodedItemID)
			}
			if err := ValidToken(strings.ReplaceAll(enc, "=", "_")); err != nil {
				t.Fatalf("encoding %q is not a subject token: %v", enc, err)
			}
			got, err := DecodeItemID(enc)
			if tc.reverses {
				if err != nil || got != tc.id {
					t.Fatalf("DecodeItemID = %q, %v; want %q", got, err, tc.id)
				}
				return
			}
			if !errors.Is(err, ErrHashedItemID) {
				t.Fatalf("DecodeItemID of a digest: err = %v, want ErrHashedItemID", err)
			}
			if !strings.HasPrefix(enc, "=") || len(enc) != 44 {
				t.Fatalf("digest encoding %q: want '=' and 43 characters", enc)
			}
		})
	}
}

func TestEncodeItemIDDistinct(t *testing.T) {
	long := strings.Repeat("x", 200)
	ids := []string{long, long + "y", strings.Repeat("x", 97), strings.Repeat("x", 96)}
	seen := map[string]string{}
	for _, id := range ids {
		enc := EncodeItemID(id)
		if other, dup := seen[enc]; dup {
			t.Fatalf("ids of %d and %d bytes share the encoding %q", len(id), len(other), enc)
		}
		seen[enc] = id
		if EncodeItemID(id) != enc {
			t.Fatal("encoding is not stable")
		}
	}
}
