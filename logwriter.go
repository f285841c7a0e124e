package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// logBuffer collects log lines and writes them out in batches: at least
// every interval, when its buffer fills, at once for a warning or an error,
// and on Close. A busy gateway then makes one write system call per batch
// of access-log lines instead of one per request.
type logBuffer struct {
	mu   sync.Mutex
	buf  *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

// newLogger is the gateway's JSON logger on w. When w is a file (standard
// error, in production) its lines are batched; close returns once every
// line is written.
func newLogger(w io.Writer, level slog.Leveler) (logger *slog.Logger, close func()) {
	opts := &slog.HandlerOptions{Level: level}
	f, ok := w.(*os.File)
	if !ok {
		return slog.New(slog.NewJSONHandler(w, opts)), func() {}
	}
	b := &logBuffer{buf: bufio.NewWriterSize(f, 64<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go b.flushEvery(100 * time.Millisecond)
	return slog.New(urgentFlush{slog.NewJSONHandler(b, opts), b}), b.close
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) flush() {
	b.mu.Lock()
	b.buf.Flush()
	b.mu.Unlock()
}

func (b *logBuffer) flushEvery(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.flush()
		case <-b.stop:
			b.flush()
			return
		}
	}
}

func (b *logBuffer) close() {
	close(b.stop)
	<-b.done
}

// urgentFlush writes warnings and errors out at once: an operator watching
// the log should not wait for them.
type urgentFlush struct {
	slog.Handler
	b *logBuffer
}

func (h urgentFlush) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.b.flush()
	}
	return err
}

func (h urgentFlush) WithAttrs(attrs []slog.Attr) slog.Handler {
	return urgentFlush{h.Handler.WithAttrs(attrs), h.b}
}

func (h urgentFlush) WithGroup(name string) slog.Handler {
	return urgentFlush{h.Handler.WithGroup(name), h.b}
}
