package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// planPollEvery is how often the server looks at the -plans file: a change
// is read within a second.
const planPollEvery = 250 * time.Millisecond

// planWatcher reads the -plans file into a planTable again when the file
// changes, in place or replaced by a rename (its size, modification time
// or identity differs from the file last read), and on SIGHUP. A file that
// cannot be read, or is invalid, leaves the plans last read in place, and
// the error is logged once, until the file changes again.
type planWatcher struct {
	reader *planReader
	table  *planTable
	log    *slog.Logger
	last   os.FileInfo // the file last read; nil after it could not be found
	hup    chan os.Signal
	stop   chan struct{}
	done   chan struct{}
}

// watchPlans reads the plans of reader into table, then watches the file
// every poll (0: planPollEvery) until the returned function is called,
// which waits until the watcher has stopped. An error reading the file
// the first time is returned, and nothing watches.
func watchPlans(reader *planReader, table *planTable, poll time.Duration, log *slog.Logger) (stop func(), err error) {
	plans, fi, err := reader.read()
	if err != nil {
		return nil, fmt.Errorf("-plans: %w", err)
	}
	table.plans.Store(&plans)
	if poll == 0 {
		poll = planPollEvery
	}
	w := &planWatcher{reader: reader, table: table, log: log, last: fi,
		hup: make(chan os.Signal, 1), stop: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(w.hup, syscall.SIGHUP)
	go w.run(poll)
	return func() {
		signal.Stop(w.hup)
		close(w.stop)
		<-w.done
	}, nil
}

func (w *planWatcher) run(poll time.Duration) {
	defer close(w.done)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.hup:
			w.reread("SIGHUP")
		case <-tick.C:
			fi, err := os.Stat(w.reader.path)
			switch {
			case err != nil:
				if w.last != nil {
					w.log.Error("geocoding: -plans: the file cannot be read; keeping the plans last read", "err", err)
				}
				w.last = nil
			case w.last == nil || !os.SameFile(fi, w.last) || fi.Size() != w.last.Size() || !fi.ModTime().Equal(w.last.ModTime()):
				w.reread("changed")
			}
		}
	}
}

// reread reads the plans again, for the reason why, and logs what came of it.
func (w *planWatcher) reread(why string) {
	plans, fi, err := w.reader.read()
	w.last = fi
	if err != nil {
		w.log.Error("geocoding: -plans: not read again; keeping the plans last read", "why", why, "err", err)
		return
	}
	w.table.plans.Store(&plans)
	w.log.Info("geocoding: -plans: read again", "why", why, "file", w.reader.path, "plans", len(plans))
}
