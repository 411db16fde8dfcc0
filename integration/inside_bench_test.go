package integration

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

// BenchmarkInside measures round trips into a sandbox through the daemon —
// a trivial call in a named shell, `1+1` in a code context, a plain exec of
// `true` — beside raw `runsc exec true` in the same sandbox, in the same
// run. Each reports its median and 95th percentile in ms:
//
//	make build
//	WARREN_RUNSC=... WARREN_BIN=$PWD/bin go test -run '^$' -bench BenchmarkInside -benchtime 50x ./integration/
func BenchmarkInside(b *testing.B) {
	s := StartServer(b)
	c := s.Client
	ctx := ctxT(b)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.CreateShell(ctx, sb.ID, api.CreateShellRequest{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	if res, err := c.RunCode(ctx, sb.ID, api.CodeRequest{Code: "0"}); err != nil || res.Error != nil {
		b.Fatalf("warming the code context: %+v, %v", res, err)
	}
	rid := s.RuntimeID(sb.ID)

	measure := func(b *testing.B, call func() error) {
		if err := call(); err != nil { // warm: connections, caches
			b.Fatal(err)
		}
		var times []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := call(); err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(start))
		}
		slices.Sort(times)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(times[len(times)/2]), "median-ms")
		b.ReportMetric(ms(times[len(times)*95/100]), "p95-ms")
	}
	check := func(res api.ExecResult, err error) error {
		if err == nil && res.ExitCode != 0 {
			b.Fatalf("exit code %d: %s", res.ExitCode, res.Stderr)
		}
		return err
	}
	b.Run("shell-true", func(b *testing.B) {
		measure(b, func() error { return check(c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "bench", Command: "true"})) })
	})
	b.Run("code-1+1", func(b *testing.B) {
		measure(b, func() error {
			res, err := c.RunCode(ctx, sb.ID, api.CodeRequest{Code: "1+1"})
			if err == nil && res.Result != "2" {
				b.Fatalf("1+1: got %+v", res)
			}
			return err
		})
	})
	b.Run("exec-true", func(b *testing.B) {
		measure(b, func() error { return check(c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})) })
	})
	b.Run("runsc-exec-true", func(b *testing.B) {
		measure(b, func() error {
			out, err := exec.Command(s.Runsc, "--root", s.RunscRoot(), "exec", rid, "true").CombinedOutput()
			if err != nil {
				b.Fatalf("runsc exec: %v: %s", err, out)
			}
			return nil
		})
	})
}
