package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"testing"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// TestGenReaderSHA256 reads a generation object through a reference that carries a SHA-256, as
// a signed manifest's do: with the object's own sum it reads, with another (an object swapped for
// a valid one whose size and checksum match) the last word is refused as untrusted and a bad
// signature, through ReadWords and through Verify.
func TestGenReaderSHA256(t *testing.T) {
	ctx := context.Background()
	s, _ := newDirStore(t, 3)
	sv := newSaver(s)
	if _, _, err := sv.save(ckpt{7: 1, 6: 2, 5: 3}, nil); err != nil {
		t.Fatal(err)
	}
	ref := sv.base[7]
	obj, err := s.OpenObject(ctx, "u", ref.Object)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	good := ref
	good.SHA256 = sha256.Sum256(raw)
	bad := good
	bad.SHA256[5] ^= 1
	for _, tc := range []struct {
		name   string
		ref    snapshot.GenRef
		verify bool
		want   bool // refused
	}{
		{"own sum", good, false, false},
		{"own sum, Verify", good, true, false},
		{"another sum", bad, false, true},
		{"another sum, Verify", bad, true, true},
	} {
		r, err := s.OpenGeneration(ctx, "u", tc.ref, 7, []uint64{testGroups * 8})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.verify {
			err = r.Verify()
		} else {
			err = r.ReadWords(make([]uint64, testGroups*8))
		}
		r.Close()
		refused := errors.Is(err, snapshot.ErrBadSignature) && errors.Is(err, ErrUntrusted)
		if refused != tc.want || (!tc.want && err != nil) {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.want)
		}
	}
}
