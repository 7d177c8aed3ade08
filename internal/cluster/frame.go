package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A watch streams JSON watch events, one object after another. client-go's
// JSON framer finds each with encoding/json (a scan to find its end and a
// second, into a json.RawMessage), then the envelope's decoding scans it
// twice more (a validity check, then a skip over its object) before the
// object itself is decoded: a hub reading 500 clusters spent more CPU
// finding and unwrapping its watch events than decoding them
// (docs/performance.md). Here a frame's end is found by one pass that
// follows nesting and strings alone, and the envelope as the API server
// writes it is split without a scan: the object's decoding checks them.

// nesting follows where a JSON object or array ends, across reads: its
// depth and strings, not its validity.
type nesting struct {
	depth            int
	inString, escape bool
}

// end is the index just past the value's end in b, or -1 when b ends
// before it.
func (s *nesting) end(b []byte) int {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if s.inString {
			if s.escape {
				s.escape = false
				continue
			}
			// Most of a Flux object is strings: to the next quote or
			// backslash at once.
			j := bytes.IndexAny(b[i:], `"\`)
			if j < 0 {
				return -1
			}
			i += j
			if b[i] == '\\' {
				s.escape = true
			} else {
				s.inString = false
			}
			continue
		}
		switch c {
		case '"':
			s.inString = true
		case '{', '[':
			s.depth++
		case '}', ']':
			if s.depth--; s.depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// framer frames a stream of JSON objects (runtime.Framer).
type framer struct{}

func (framer) NewFrameReader(r io.ReadCloser) io.ReadCloser { return &frameReader{r: r} }

func (framer) NewFrameWriter(w io.Writer) io.Writer { return w } // its client only reads

// frameReader returns one object a Read (io.ErrShortBuffer while a frame
// does not fit, the rest on the next Reads: the contract of client-go's
// streaming decoder).
type frameReader struct {
	r          io.ReadCloser
	buf        []byte
	start, end int    // what of buf is read and not yet returned
	rest       []byte // what of the current frame is not yet returned
}

func (f *frameReader) Read(data []byte) (int, error) {
	if len(f.rest) == 0 {
		frame, err := f.next()
		if err != nil {
			return 0, err
		}
		f.rest = frame
	}
	n := copy(data, f.rest)
	if f.rest = f.rest[n:]; len(f.rest) > 0 {
		return n, io.ErrShortBuffer
	}
	return n, nil
}

// next is the next frame, in buf until the next call.
func (f *frameReader) next() ([]byte, error) {
	var s nesting
	scanned := 0 // of buf[start:end], how much s has seen
	for {
		if s.depth == 0 { // leading white space
			for f.start < f.end && isSpace(f.buf[f.start]) {
				f.start++
			}
			if f.start < f.end && f.buf[f.start] != '{' {
				return nil, fmt.Errorf("a watch stream holds %q where an object should begin", f.buf[f.start])
			}
		}
		if f.start < f.end {
			if n := s.end(f.buf[f.start+scanned : f.end]); n >= 0 {
				frame := f.buf[f.start : f.start+scanned+n]
				f.start += scanned + n
				return frame, nil
			}
			scanned = f.end - f.start
		}
		// More is needed: what is left moved to the front, the buffer
		// doubled when full, then a read.
		f.end = copy(f.buf, f.buf[f.start:f.end])
		f.start = 0
		if f.end == len(f.buf) {
			f.buf = append(f.buf, make([]byte, max(len(f.buf), 4096))...)
		}
		n, err := f.r.Read(f.buf[f.end:])
		f.end += n
		switch {
		case n > 0:
		case errors.Is(err, io.EOF) && f.end > 0:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func (f *frameReader) Close() error { return f.r.Close() }

// splitEvent splits a watch event as the API server writes it,
// {"type":"...","object":{...}}, into its type (a word in capitals) and
// object, the object scanned for nesting alone; false for any other
// shape.
func splitEvent(data []byte, ev *metav1.WatchEvent) bool {
	const head, mid = `{"type":"`, `","object":`
	rest, ok := bytes.CutPrefix(data, []byte(head))
	if !ok {
		return false
	}
	typ, obj, ok := bytes.Cut(rest, []byte(mid))
	if !ok || len(typ) == 0 || len(obj) == 0 || obj[0] != '{' {
		return false
	}
	for _, c := range typ { // ADDED, MODIFIED, ...: a word, as decoded
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	var s nesting
	n := s.end(obj)
	if n < 0 || !bytes.Equal(bytes.TrimSpace(obj[n:]), []byte("}")) {
		return false
	}
	// The object is data's, not a copy: client-go's watch decodes it
	// before it reads the next event into the same buffer.
	ev.Type, ev.Object = string(typ), runtime.RawExtension{Raw: obj[:n]}
	return true
}
