package gitpush

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// WritePack writes a packfile (version 2) of objs. An object with an entry in bases is sent as
// a delta against that base (REF_DELTA: a thin pack, which git's receive-pack completes from its
// own objects), when the delta is smaller; every object is compressed at zlib's fastest level,
// since a push crosses a network where CPU, not bytes, is what a large tree costs.
func WritePack(w io.Writer, s storer.EncodedObjectStorer, objs []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	sum := sha1.New()
	pw := &packWriter{w: io.MultiWriter(w, sum), sum: sum}
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(objs)))
	if _, err := pw.w.Write(hdr[:]); err != nil {
		return err
	}
	for _, h := range objs {
		obj, err := s.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		data, err := readAll(obj)
		if err != nil {
			return err
		}
		if base, ok := bases[h]; ok {
			if bobj, err := s.EncodedObject(plumbing.AnyObject, base); err == nil {
				if bdata, err := readAll(bobj); err == nil {
					if d := spliceDelta(bdata, data); d != nil {
						if err := pw.object(plumbing.REFDeltaObject, d, &base); err != nil {
							return err
						}
						continue
					}
				}
			}
		}
		if err := pw.object(obj.Type(), data, nil); err != nil {
			return err
		}
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

type packWriter struct {
	w   io.Writer
	sum hash.Hash
	z   *zlib.Writer
}

// object writes one entry: its type and size, the base of a delta, the compressed data.
func (p *packWriter) object(t plumbing.ObjectType, data []byte, base *plumbing.Hash) error {
	size := len(data)
	hdr := []byte{byte(t)<<4 | byte(size&0x0f)}
	for size >>= 4; size > 0; size >>= 7 {
		hdr[len(hdr)-1] |= 0x80
		hdr = append(hdr, byte(size&0x7f))
	}
	if base != nil {
		hdr = append(hdr, base[:]...)
	}
	if _, err := p.w.Write(hdr); err != nil {
		return err
	}
	if p.z == nil {
		var err error
		if p.z, err = zlib.NewWriterLevel(p.w, zlib.BestSpeed); err != nil {
			return err
		}
	} else {
		p.z.Reset(p.w)
	}
	if _, err := p.z.Write(data); err != nil {
		return err
	}
	return p.z.Close()
}

func readAll(obj plumbing.EncodedObject) ([]byte, error) {
	r, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// spliceDelta is a git delta that makes dst from src when dst is src with one run of bytes
// replaced (a tree with an entry added, changed or removed): copy the common prefix, insert
// what differs, copy the common suffix. Nil when that is not at least twice smaller than dst.
func spliceDelta(src, dst []byte) []byte {
	n := min(len(src), len(dst))
	pre := 0
	for pre < n && src[pre] == dst[pre] {
		pre++
	}
	suf := 0
	for suf < n-pre && src[len(src)-1-suf] == dst[len(dst)-1-suf] {
		suf++
	}
	mid := dst[pre : len(dst)-suf]
	if len(mid)*2 >= len(dst) {
		return nil
	}
	var b bytes.Buffer
	b.Write(deltaSize(len(src)))
	b.Write(deltaSize(len(dst)))
	deltaCopy(&b, 0, pre)
	for len(mid) > 0 {
		k := min(len(mid), 0x7f)
		b.WriteByte(byte(k))
		b.Write(mid[:k])
		mid = mid[k:]
	}
	deltaCopy(&b, len(src)-suf, suf)
	return b.Bytes()
}

// deltaSize is a size in a delta's header: 7 bits a byte, least significant first.
func deltaSize(n int) []byte {
	var out []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

// deltaCopy writes copy instructions for size bytes of the source from off, at most 0xffff
// bytes each (sizes of up to 3 bytes are allowed, but 0x10000 is what git itself emits).
func deltaCopy(b *bytes.Buffer, off, size int) {
	for size > 0 {
		k := min(size, 0xffff)
		op := byte(0x80)
		var args []byte
		for i := range 4 {
			if v := byte(off >> (8 * i)); v != 0 {
				op |= 1 << i
				args = append(args, v)
			}
		}
		for i := range 2 {
			if v := byte(k >> (8 * i)); v != 0 {
				op |= 1 << (4 + i)
				args = append(args, v)
			}
		}
		b.WriteByte(op)
		b.Write(args)
		off += k
		size -= k
	}
}
