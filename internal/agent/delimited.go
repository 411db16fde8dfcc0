package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

const (
	// markerStart begins every end-of-call marker: a record separator, so
	// text output never holds one by accident, then "W:" and the call's
	// random mark. A payload (a shell's exit status) may follow, up to the
	// next record separator.
	markerStart = "\x1eW:"
	markerEnd   = 0x1e
	// maxMarkerPayload bounds what may sit between a mark and markerEnd.
	maxMarkerPayload = 32
	// maxPending bounds the output kept between calls (what a shell's
	// background jobs write while no call runs); it is handed to the next
	// call.
	maxPending = 1 << 20
)

// newMark returns a fresh random mark for one call.
func newMark() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// delimited reads one output pipe of a long-lived process that serves one
// call at a time (a named shell, a code context). The process ends each
// call's output on the pipe with markerStart + mark + payload + markerEnd.
// Everything before the marker goes to the call's sink; what comes while no
// call runs is kept (up to maxPending) for the next one.
//
// The process writes the marker after the call's command has finished, on
// the same pipe, so the bytes before it are all of the command's output
// (less what a background process writes at the same moment).
type delimited struct {
	f *os.File

	mu      sync.Mutex
	sink    sink        // the current call's; nil between calls
	prefix  []byte      // markerStart + the current call's mark
	found   chan string // gets the marker's payload, once
	carry   []byte      // held back: may be the start of the marker
	pending []byte      // output between calls
	dropped bool        // pending overflowed
	eof     chan struct{}
	err     error
}

func newDelimited(f *os.File) *delimited {
	d := &delimited{f: f, eof: make(chan struct{})}
	go d.run()
	return d
}

// begin starts a call whose output goes to s and ends at mark's marker,
// whose payload the returned channel receives. Output kept since the last
// call goes to s first; dropped says some of it was lost.
func (d *delimited) begin(mark string, s sink) (found <-chan string, dropped bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan string, 1)
	d.sink, d.prefix, d.found = s, []byte(markerStart+mark), ch
	if len(d.pending) > 0 {
		s.write(d.pending)
		d.pending = nil
	}
	dropped, d.dropped = d.dropped, false
	return ch, dropped
}

// end detaches the current call, if it has not found its marker yet (it
// was abandoned: the process died or was killed).
func (d *delimited) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sink != nil && len(d.carry) > 0 {
		d.sink.write(d.carry)
	}
	d.sink, d.prefix, d.found, d.carry = nil, nil, nil, nil
}

// waitEOF waits up to grace for the pipe to end, then stops reading it.
func (d *delimited) waitEOF(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-d.eof:
	case <-t.C:
		_ = d.f.SetReadDeadline(time.Now())
		<-d.eof
	}
}

func (d *delimited) run() {
	defer close(d.eof)
	defer d.f.Close()
	buf := make([]byte, readChunk)
	for {
		n, err := d.f.Read(buf)
		if n > 0 {
			d.feed(buf[:n])
		}
		if err != nil {
			d.mu.Lock()
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				d.err = err
			}
			if len(d.carry) > 0 {
				if d.sink != nil {
					d.sink.write(d.carry)
				}
				d.carry = nil
			}
			d.mu.Unlock()
			return
		}
	}
}

// feed routes a chunk of output.
func (d *delimited) feed(b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	data := b
	if len(d.carry) > 0 {
		data = append(d.carry, b...)
		d.carry = nil
	}
	for len(data) > 0 {
		if d.sink == nil {
			d.keep(data)
			return
		}
		i := bytes.Index(data, d.prefix)
		if i < 0 {
			keep := partialPrefix(data, d.prefix)
			d.sink.write(data[:len(data)-keep])
			d.carry = append([]byte(nil), data[len(data)-keep:]...)
			return
		}
		rest := data[i+len(d.prefix):]
		j := bytes.IndexByte(rest, markerEnd)
		if j < 0 {
			if len(rest) > maxMarkerPayload { // not a marker after all
				d.sink.write(data[:i+1])
				data = data[i+1:]
				continue
			}
			d.sink.write(data[:i])
			d.carry = append([]byte(nil), data[i:]...)
			return
		}
		d.sink.write(data[:i])
		d.found <- string(rest[:j])
		d.sink, d.prefix, d.found = nil, nil, nil
		data = rest[j+1:]
	}
}

// takePending returns and forgets the output kept between calls.
func (d *delimited) takePending() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.pending
	d.pending = nil
	return p
}

// keep adds output that came between calls to pending.
func (d *delimited) keep(b []byte) {
	if room := maxPending - len(d.pending); len(b) > room {
		b = b[:room]
		d.dropped = true
	}
	d.pending = append(d.pending, b...)
}

// partialPrefix returns the length of the longest end of data that is a
// proper start of prefix. prefix holds its first byte (markerStart's record
// separator) only once, so only the last such byte can start it.
func partialPrefix(data, prefix []byte) int {
	from := max(0, len(data)-(len(prefix)-1))
	i := bytes.LastIndexByte(data[from:], prefix[0])
	if i < 0 {
		return 0
	}
	tail := data[from+i:]
	if bytes.HasPrefix(prefix, tail) {
		return len(tail)
	}
	return 0
}

// discardSink drops what it is given.
type discardSink struct{}

func (discardSink) write([]byte) {}
func (discardSink) flush()       {}
