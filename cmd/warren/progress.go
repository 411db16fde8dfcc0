package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/warrenhq/warren/api"
)

// progress shows a long operation on w (stderr): on a terminal, a bar
// per phase with the messages printed above it; elsewhere, each new
// message as a plain line, so logs get no bar spam. It is safe for
// concurrent use: an import reports bytes sent while the server reports
// what it does with them.
type progress struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	bar  *progressbar.ProgressBar
	key  string // phase and total the bar was made for
	last string // the last line printed

	// sending is set while local bytes drive the bar: the server's
	// counts then only echo them.
	sending bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// server shows a progress line of the server.
func (p *progress) server(ev api.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := ev.Message
	if ev.Phase != "" && line != "" {
		line = ev.Phase + ": " + line
	}
	if line == "" && !p.tty {
		line = ev.Phase
	}
	p.println(line)
	if p.tty && !p.sending && ev.Total > 0 {
		p.set(ev.Phase, ev.Current, ev.Total)
	}
}

// sent shows n of total local bytes sent; total < 0 when unknown.
func (p *progress) sent(n, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sending = true
	if p.tty {
		p.set("upload", n, total)
	}
}

// sendDone marks the end of the local bytes.
func (p *progress) sendDone(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sending = false
	p.println(fmt.Sprintf("upload: sent %s", humanSize(n)))
	p.finishBar()
}

// done ends the display.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishBar()
}

// println prints line once, above the bar if there is one.
func (p *progress) println(line string) {
	if line == "" || line == p.last {
		return
	}
	p.last = line
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintln(p.w, line)
	if p.bar != nil {
		p.bar.RenderBlank()
	}
}

// set moves the bar of phase to current of total, making a new bar when
// the phase or the total changes.
func (p *progress) set(phase string, current, total int64) {
	key := fmt.Sprintf("%s/%d", phase, total)
	if p.bar == nil || key != p.key {
		p.finishBar()
		p.key = key
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(phase),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionClearOnFinish(),
		)
	}
	if total > 0 {
		current = min(current, total)
	}
	p.bar.Set64(current)
}

func (p *progress) finishBar() {
	if p.bar == nil {
		return
	}
	p.bar.Finish() // clears the bar, and stops a spinner's redraws
	p.bar, p.key = nil, ""
}

// countingReader reports the bytes read through it.
type countingReader struct {
	r     io.Reader
	n     int64
	total int64 // -1 when unknown
	p     *progress
}

func (cr *countingReader) Read(b []byte) (int, error) {
	n, err := cr.r.Read(b)
	cr.n += int64(n)
	if n > 0 {
		cr.p.sent(cr.n, cr.total)
	}
	if err == io.EOF {
		cr.p.sendDone(cr.n)
	}
	return n, err
}

// humanSize is n bytes for people: "512 B", "3.4 MiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
