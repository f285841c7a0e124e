package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// profileTargets records where each gateway's CPU time goes: after the
// measured rounds, one more run per connection count and gateway, not
// counted in the table, while the gateway (built with -tags pprof) takes
// a CPU profile of itself. Each run leaves NAME.pprof and NAME.txt (the
// top functions by self and by cumulative time) in h.s.profile.
func (h *harness) profileTargets(ctx context.Context, mode string, targets []*target) error {
	if h.s.profile == "" {
		return nil
	}
	if err := os.MkdirAll(h.s.profile, 0o755); err != nil {
		return err
	}
	for _, conns := range h.s.conns {
		for _, t := range targets {
			if t.admin == "" {
				continue
			}
			base := filepath.Join(h.s.profile, fmt.Sprintf("%s-%s-c%d", mode, t.name, conns))
			got := make(chan error, 1)
			go func() { got <- fetchProfile(ctx, t.admin, h.s.duration, base+".pprof") }()
			res, err := h.loader.run(ctx, h.pin, t, conns, h.s.duration)
			if perr := <-got; perr != nil {
				return fmt.Errorf("profile %s: %w", t.name, perr)
			}
			if err != nil {
				return err
			}
			var text []byte
			for _, order := range []string{"-flat", "-cum"} {
				out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", order, "-nodecount", "45", base+".pprof").Output()
				if err != nil {
					return fmt.Errorf("go tool pprof %s: %w", base+".pprof", err)
				}
				text = append(text, out...)
				text = append(text, '\n')
			}
			if err := os.WriteFile(base+".txt", text, 0o644); err != nil {
				return err
			}
			h.logf("%s: profiled %s at %d connections (%.0f req/s while profiling): %s.txt", mode, t.name, conns, res.perSecond, base)
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetchProfile asks the gateway at admin for a CPU profile of d and
// writes it to path.
func fetchProfile(ctx context.Context, admin string, d time.Duration, path string) error {
	seconds := strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/profile?seconds="+seconds, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
