package setup

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a pull: a bar per blob on a terminal, else one line per
// step (each status once, a blob's line when it starts and when it is
// complete), which a log or a test can read.
type progress struct {
	w        io.Writer
	terminal bool
	bar      *progressbar.ProgressBar
	barFor   string
	seen     map[string]bool
}

func newProgress(w io.Writer, terminal bool) *progress {
	return &progress{w: w, terminal: terminal, seen: map[string]bool{}}
}

// short is a digest's first 12 hex digits, as Ollama shows it.
func short(digest string) string {
	d := digest
	if len(d) > 7 && d[:7] == "sha256:" {
		d = d[7:]
	}
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

func (p *progress) update(pr Progress) {
	if pr.Digest != "" && pr.Total > 0 {
		p.blob(pr)
		return
	}
	p.finishBar()
	if !p.seen["status "+pr.Status] {
		p.seen["status "+pr.Status] = true
		fmt.Fprintf(p.w, "  %s\n", pr.Status)
	}
}

func (p *progress) blob(pr Progress) {
	if p.terminal {
		if p.barFor != pr.Digest {
			p.finishBar()
			p.bar = progressbar.NewOptions64(pr.Total, progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("  pulling "+short(pr.Digest)), progressbar.OptionShowBytes(true), progressbar.OptionShowCount(),
				progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }))
			p.barFor = pr.Digest
		}
		_ = p.bar.Set64(pr.Completed)
		return
	}
	if !p.seen["start "+pr.Digest] {
		p.seen["start "+pr.Digest] = true
		fmt.Fprintf(p.w, "  pulling %s: %s\n", short(pr.Digest), mibString(pr.Total))
	}
	if pr.Completed >= pr.Total && !p.seen["done "+pr.Digest] {
		p.seen["done "+pr.Digest] = true
		fmt.Fprintf(p.w, "  pulled %s\n", short(pr.Digest))
	}
}

func (p *progress) finishBar() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar, p.barFor = nil, ""
	}
}
