// Command consumer proves that a user outside the repository can go get and
// build the published modules of tokenfair/ratelimit as they are committed.
//
// It packs each published module of a revision (HEAD by default) into a
// module zip, serves them from a file-system GOPROXY in a temporary
// directory, at the version the nested go.mod files require of the root,
// then creates a consumer module outside the repository, fetches the modules
// with go get (no replace directives, no go.work) and runs testdata/main.go,
// which sends requests through nethttp, ginlimit and echolimit.
//
// Run it from this directory, outside the workspace:
//
//	GOWORK=off go run . [-repo DIR] [-rev REV] [-keep]
//
// Third-party modules come from the local module cache first, then from the
// GOPROXY configured for the go command. The project's own modules are
// exempted from the checksum database (GONOSUMDB), which cannot know them;
// the consumer uses a module cache of its own, so a stale copy of an earlier
// run is never used.
package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// root is the module path of the core; published lists the directories of
// the modules a user can go get, relative to the repository's root ("" for
// the core itself). examples and bench are not published.
const root = "github.com/tokenfair/ratelimit"

var published = []string{"", "ginlimit", "echolimit", "redisstore", "metrics", "grpclimit", "otellimit"}

// packages are what the consumer program imports, each fetched with go get
// the way the README tells a user to.
var packages = []string{
	root,
	root + "/memorystore",
	root + "/nethttp",
	root + "/ginlimit",
	root + "/echolimit",
	root + "/redisstore",
	root + "/metrics",
	root + "/grpclimit",
	root + "/otellimit",
}

//go:embed testdata/main.go
var program []byte

func main() {
	repo := flag.String("repo", "", "the repository's root (default: the git top level of the current directory)")
	rev := flag.String("rev", "HEAD", "the revision to pack")
	keep := flag.Bool("keep", false, "keep the temporary directory and print its name")
	flag.Parse()
	if err := run(*repo, *rev, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(repo, rev string, keep bool) error {
	if repo == "" {
		out, err := output("", nil, "git", "rev-parse", "--show-toplevel")
		if err != nil {
			return err
		}
		repo = strings.TrimSpace(out)
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ratelimit-consumer-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("consumer: kept", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	version, err := requiredVersion(repo, rev)
	if err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	for _, dir := range published {
		if err := pack(proxy, repo, rev, dir, version); err != nil {
			return err
		}
	}

	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		return err
	}
	gomod := "module example.com/consumer\n\ngo 1.25.0\n"
	if err := os.WriteFile(filepath.Join(consumer, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(consumer, "main.go"), program, 0o644); err != nil {
		return err
	}

	env, err := consumerEnv(proxy, filepath.Join(tmp, "modcache"))
	if err != nil {
		return err
	}
	if _, err := output(consumer, env, "go", append([]string{"get"}, packages...)...); err != nil {
		return err
	}
	if err := checkRequirements(filepath.Join(consumer, "go.mod"), version); err != nil {
		return err
	}
	out, err := output(consumer, env, "go", "run", "-trimpath", ".")
	fmt.Print(out)
	return err
}

// requiredVersion returns the version of the core that the nested published
// modules require at rev, which must be one and the same for all of them,
// and for their requirements of each other.
func requiredVersion(repo, rev string) (string, error) {
	version := ""
	for _, dir := range published[1:] {
		file := path.Join(dir, "go.mod")
		data, err := output(repo, nil, "git", "show", rev+":"+file)
		if err != nil {
			return "", err
		}
		f, err := modfile.ParseLax(file, []byte(data), nil)
		if err != nil {
			return "", err
		}
		found := false
		for _, r := range f.Require {
			if r.Mod.Path != root && !strings.HasPrefix(r.Mod.Path, root+"/") {
				continue
			}
			if version == "" {
				version = r.Mod.Version
			}
			if r.Mod.Version != version {
				return "", fmt.Errorf("%s requires %s %s, want %s as every other published module", file, r.Mod.Path, r.Mod.Version, version)
			}
			found = found || r.Mod.Path == root
		}
		if !found {
			return "", fmt.Errorf("%s does not require %s", file, root)
		}
	}
	return version, nil
}

// pack writes the module in dir at rev to the file-system proxy as version:
// the list, .info, .mod and .zip files the go command asks a proxy for.
func pack(proxy, repo, rev, dir, version string) error {
	modPath := root
	if dir != "" {
		modPath = root + "/" + dir
	}
	mod := module.Version{Path: modPath, Version: version}
	escaped, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	at := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}

	gomod, err := output(repo, nil, "git", "show", rev+":"+path.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	if got := modfile.ModulePath([]byte(gomod)); got != modPath {
		return fmt.Errorf("%s/go.mod: module %q, want %q", dir, got, modPath)
	}
	commitTime, err := output(repo, nil, "git", "show", "-s", "--format=%cI", rev)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(commitTime))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}

	z, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromVCS(z, mod, repo, rev, dir); err != nil {
		z.Close()
		return fmt.Errorf("packing %s: %w", mod, err)
	}
	if err := z.Close(); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(at, version+".mod"), []byte(gomod), 0o644),
		os.WriteFile(filepath.Join(at, version+".info"), info, 0o644),
		os.WriteFile(filepath.Join(at, "list"), []byte(version+"\n"), 0o644),
	)
}

// consumerEnv is the environment of a user's build: no workspace, the
// project's modules from the file-system proxy and everything else from the
// local module cache or the configured proxy, a module cache of its own.
func consumerEnv(proxy, modcache string) ([]string, error) {
	out, err := output("", nil, "go", "env", "GOPROXY", "GOMODCACHE", "GOFLAGS")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		return nil, fmt.Errorf("go env printed %q", out)
	}
	upstream, cache, flags := lines[0], lines[1], lines[2]
	goproxy := "file://" + filepath.ToSlash(proxy)
	if cache != "" {
		goproxy += ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	}
	if upstream != "" && upstream != "off" {
		goproxy += "," + upstream
	}
	env := os.Environ()
	return append(env,
		"GOWORK=off",
		"GOPROXY="+goproxy,
		"GOMODCACHE="+modcache,
		"GOFLAGS="+strings.TrimSpace(flags+" -mod=mod -modcacherw"),
		"GONOSUMDB="+root,
		"GOPRIVATE=",
		"GONOPROXY=",
	), nil
}

// checkRequirements reports an error unless the consumer's go.mod requires
// each published module at version and replaces nothing.
func checkRequirements(file, version string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return err
	}
	if len(f.Replace) != 0 {
		return fmt.Errorf("the consumer's go.mod has replace directives")
	}
	got := map[string]string{}
	for _, r := range f.Require {
		got[r.Mod.Path] = r.Mod.Version
	}
	for _, dir := range published {
		p := root
		if dir != "" {
			p = root + "/" + dir
		}
		if got[p] != version {
			return fmt.Errorf("the consumer requires %s %q, want %s", p, got[p], version)
		}
	}
	return nil
}

// output runs a command in dir and returns its standard output; on failure
// the error carries the command and its standard error.
func output(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}
