package sandbox

import "time"

// phases times the steps of an operation for its debug log line: each mark
// records the time since the previous one under the step's name.
type phases struct {
	last  time.Time
	steps []any // name, duration pairs, ready for slog
}

func newPhases() *phases { return &phases{last: time.Now()} }

func (p *phases) mark(step string) {
	now := time.Now()
	p.steps = append(p.steps, step, now.Sub(p.last).Round(100*time.Microsecond))
	p.last = now
}

// attrs returns the recorded steps as slog key-value pairs.
func (p *phases) attrs() []any { return p.steps }
