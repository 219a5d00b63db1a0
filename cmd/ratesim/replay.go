package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// replay reads the input, decides every request, writes the decisions and
// the summary, and draws the picture. It returns the exit status.
func replay(cfg *config, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	in, name := stdin, "standard input"
	var file *os.File
	if cfg.input != "" && cfg.input != "-" {
		f, err := os.Open(cfg.input)
		if err != nil {
			errorf(stderr, "%v", err)
			return exitIO
		}
		defer f.Close()
		in, name, file = f, cfg.input, f
	}
	var plotFile *os.File
	if cfg.plot != "" {
		// Create the picture's file first, to fail before a long replay.
		f, err := os.Create(cfg.plot)
		if err != nil {
			errorf(stderr, "%v", err)
			return exitIO
		}
		plotFile = f
		defer func() {
			// Leave no empty or partial picture behind after a failure.
			if code != exitOK {
				f.Close()
				os.Remove(cfg.plot)
			}
		}()
	}

	sim := newSimulator(cfg.policy, cfg.start.value == "empty", cfg.epoch)
	if plotFile != nil {
		keys := cfg.plotKeys
		if len(keys) == 0 {
			var cleanup func()
			var err error
			in, keys, cleanup, err = busiest(cfg, in, file)
			defer cleanup()
			if err != nil {
				errorf(stderr, "reading %s: %v", name, err)
				return exitIO
			}
		}
		sim.plot = make(map[string]*series, len(keys))
		for _, k := range keys {
			sim.plot[k] = new(series)
		}
		sim.plotOrder = keys
	}

	src := newSource(cfg, in)
	out := newOutput(stdout, cfg.format.value)
	writeFailed := func(err error) int {
		errorf(stderr, "writing the decisions: %v", err)
		return exitIO
	}
	if err := out.start(); err != nil {
		return writeFailed(err)
	}
	logQuota := cfg.log.value != "" && isQuota(cfg.policy)
	var (
		req       request
		skipped   int
		firstSkip error
	)
	for {
		err := src.next(&req)
		if err == io.EOF {
			break
		}
		if err != nil {
			var le *lineError
			if errors.As(err, &le) && cfg.skipBad {
				if skipped++; firstSkip == nil {
					firstSkip = le
				}
				continue
			}
			if err := out.flush(); err != nil {
				return writeFailed(err)
			}
			if le != nil {
				errorf(stderr, "%v", le)
				return exitUsage
			}
			errorf(stderr, "reading %s: %v", name, err)
			return exitIO
		}
		if logQuota && sim.total.requests == 0 {
			// A quota's time 0 is the first line's timestamp.
			ls := src.(*logSource)
			if !inT0Range(time.Unix(ls.base, 0)) {
				errorf(stderr, "line %d: timestamp %s: a calendar quota replays times %s", ls.lines.n, quote(ls.stamp), t0Range)
				return exitUsage
			}
			sim.begin(ls.base * 1e9)
		}
		ks, res := sim.take(&req)
		if err := out.write(req.t, ks.name, req.cost, res); err != nil {
			return writeFailed(err)
		}
	}
	if err := out.flush(); err != nil {
		return writeFailed(err)
	}

	var summary strings.Builder
	summary.WriteString(totalLine(sim.total))
	if ls, ok := src.(*logSource); ok && ls.late > 0 {
		fmt.Fprintf(&summary, "ratesim: %d %s out of order, by up to %s s; replayed at the previous time\n",
			ls.late, plural(ls.late, "line was", "lines were"), formatSeconds(ls.lateBy))
	}
	if skipped > 0 {
		fmt.Fprintf(&summary, "ratesim: skipped %d malformed %s; the first: %v\n", skipped, plural(int64(skipped), "line", "lines"), firstSkip)
	}
	for _, k := range cfg.plotKeys {
		if sim.keys[k] == nil {
			fmt.Fprintf(&summary, "ratesim: -plot-key %s: no requests with this key\n", strconv.Quote(k))
		}
	}
	io.WriteString(stderr, summary.String())
	writeKeyTable(stderr, sim.keys, cfg.top)

	if plotFile != nil {
		if err := writeSVG(plotFile, sim.plotSpec(cfg.start.value == "empty")); err != nil {
			errorf(stderr, "writing %s: %v", cfg.plot, err)
			return exitIO
		}
		if err := plotFile.Close(); err != nil {
			errorf(stderr, "writing %s: %v", cfg.plot, err)
			return exitIO
		}
	}
	return exitOK
}

// newSource returns the reader of requests for cfg's input format.
func newSource(cfg *config, r io.Reader) source {
	if cfg.log.value != "" {
		return newLogSource(r, cfg.log.value, cfg.keyField.value)
	}
	return newTraceSource(r)
}

// busiest reads the input once to find its cfg.plotTop busiest keys (most
// requests first, then by name), ignoring malformed lines, and returns a
// reader of the input from its start for the replay. A regular file is
// read again; anything else (standard input, a pipe) is copied to a
// temporary file as it is read, and cleanup removes it.
func busiest(cfg *config, in io.Reader, file *os.File) (again io.Reader, keys []string, cleanup func(), err error) {
	cleanup = func() {}
	var tmp *os.File
	if regular, _ := statRegular(file); !regular {
		if tmp, err = os.CreateTemp("", "ratesim-*.input"); err != nil {
			return nil, nil, cleanup, err
		}
		cleanup = func() {
			tmp.Close()
			os.Remove(tmp.Name())
		}
		in = io.TeeReader(in, tmp)
	}
	counts := make(map[string]*int64)
	src := newSource(cfg, in)
	var req request
	for {
		err := src.next(&req)
		if err == io.EOF {
			break
		}
		if le := (*lineError)(nil); errors.As(err, &le) {
			continue
		}
		if err != nil {
			return nil, nil, cleanup, err
		}
		if n := counts[string(req.key)]; n != nil {
			*n++
		} else {
			one := int64(1)
			counts[string(req.key)] = &one
		}
	}
	type count struct {
		key string
		n   int64
	}
	all := make([]count, 0, len(counts))
	for k, n := range counts {
		all = append(all, count{k, *n})
	}
	slices.SortFunc(all, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.key, b.key)) })
	for _, c := range all[:min(cfg.plotTop, len(all))] {
		keys = append(keys, c.key)
	}
	rewind := file
	if tmp != nil {
		rewind = tmp
	}
	if _, err := rewind.Seek(0, io.SeekStart); err != nil {
		return nil, nil, cleanup, err
	}
	return rewind, keys, cleanup, nil
}

// statRegular reports whether f is a regular file, which can be read twice.
func statRegular(f *os.File) (bool, error) {
	if f == nil {
		return false, nil
	}
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	return st.Mode().IsRegular(), nil
}
