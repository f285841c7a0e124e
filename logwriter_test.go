package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLogLinesAreBatchedButNeverLost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	logger, closeLog := newLogger(f, slog.LevelInfo)
	read := func() string { b, _ := os.ReadFile(path); return string(b) }

	logger.Info("request", "n", 1)
	// A warning goes out at once, with every line before it.
	logger.Warn("upstream failed")
	if got := read(); !strings.Contains(got, `"n":1`) || !strings.Contains(got, "upstream failed") {
		t.Fatalf("after a warning the file holds %q", got)
	}
	// An info line goes out within the flush interval.
	logger.Info("request", "n", 2)
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(read(), `"n":2`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an info line was not written within 2s")
		}
	}
	// Close writes what is left.
	logger.Info("request", "n", 3)
	closeLog()
	if got := read(); !strings.Contains(got, `"n":3`) {
		t.Fatalf("after close the file holds %q", got)
	}
}
