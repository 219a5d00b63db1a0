package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// TestRedisFlagsInvalid: a Redis flag that does not parse exits 2 with a
// message naming the form it wants and the value (never a password), and
// so do two of -redis-url, -redis-sentinel and -redis-cluster, naming
// both, and the new flags without -store redis.
func TestRedisFlagsInvalid(t *testing.T) {
	const urlForm = "want redis://[:PASSWORD@]HOST:PORT/DB, rediss://[:PASSWORD@]HOST:PORT/DB (TLS) or unix:///PATH?db=DB: "
	const sentinelForm = "want MASTER@HOST:PORT[,HOST:PORT...], such as mymaster@127.0.0.1:26379,127.0.0.1:26380: "
	const clusterForm = "want HOST:PORT[,HOST:PORT...], such as 127.0.0.1:7000,127.0.0.1:7001: "
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "redis", "-redis-url", "127.0.0.1:6379"},
			"geocoding: -redis-url 127.0.0.1:6379: " + urlForm + "no scheme; for the server at 127.0.0.1:6379, redis://127.0.0.1:6379/0\n"},
		{[]string{"-store", "redis", "-redis-url", "localhost:6379"},
			"geocoding: -redis-url localhost:6379: " + urlForm + "no scheme; for the server at localhost:6379, redis://localhost:6379/0\n"},
		{[]string{"-store", "redis", "-redis-url", "http://127.0.0.1:6379/0"},
			"geocoding: -redis-url http://127.0.0.1:6379/0: " + urlForm + `unknown scheme "http"` + "\n"},
		{[]string{"-store", "redis", "-redis-url", "redis://127.0.0.1:6379/zero"},
			"geocoding: -redis-url redis://127.0.0.1:6379/zero: " + urlForm + `invalid database number: "zero"` + "\n"},
		{[]string{"-store", "redis", "-redis-url", "redis://:s3cret@127.0.0.1:6379/zero"},
			"geocoding: -redis-url redis://:xxxxx@127.0.0.1:6379/zero: " + urlForm + `invalid database number: "zero"` + "\n"},
		{[]string{"-store", "redis", "-redis-url", "s3cret@127.0.0.1:6379"},
			"geocoding: -redis-url xxxxx@127.0.0.1:6379: " + urlForm + "no scheme\n"},
		{[]string{"-redis-url", "127.0.0.1:6379"}, "geocoding: -redis-url 127.0.0.1:6379: " + urlForm + "no scheme"},

		{[]string{"-store", "redis", "-redis-sentinel", "127.0.0.1:26379"},
			"geocoding: -redis-sentinel 127.0.0.1:26379: " + sentinelForm + "no @ between the master's name and the Sentinels' addresses\n"},
		{[]string{"-store", "redis", "-redis-sentinel", "@127.0.0.1:26379"},
			"geocoding: -redis-sentinel @127.0.0.1:26379: " + sentinelForm + "no master name before @\n"},
		{[]string{"-store", "redis", "-redis-sentinel", "mymaster@127.0.0.1"},
			"geocoding: -redis-sentinel mymaster@127.0.0.1: " + sentinelForm + `"127.0.0.1" is no HOST:PORT` + "\n"},
		{[]string{"-store", "redis", "-redis-sentinel", "mymaster@127.0.0.1:26379,,127.0.0.1:26380"},
			"geocoding: -redis-sentinel mymaster@127.0.0.1:26379,,127.0.0.1:26380: " + sentinelForm + "an empty address\n"},
		{[]string{"-store", "redis", "-redis-sentinel", "mymaster@127.0.0.1:0"},
			"geocoding: -redis-sentinel mymaster@127.0.0.1:0: " + sentinelForm + `"127.0.0.1:0": want a port from 1 to 65535` + "\n"},
		{[]string{"-store", "redis", "-redis-cluster", "127.0.0.1:7000,:7001"},
			"geocoding: -redis-cluster 127.0.0.1:7000,:7001: " + clusterForm + `":7001" has no host` + "\n"},
		{[]string{"-store", "redis", "-redis-cluster", "redis://127.0.0.1:7000"},
			"geocoding: -redis-cluster redis://127.0.0.1:7000: " + clusterForm + `"redis://127.0.0.1:7000" is no HOST:PORT` + "\n"},

		{[]string{"-store", "redis", "-redis-url", "redis://127.0.0.1:6379/0", "-redis-sentinel", "m@127.0.0.1:26379"},
			"geocoding: -redis-sentinel and -redis-url: give one of -redis-url, -redis-sentinel and -redis-cluster, not 2\n"},
		{[]string{"-store", "redis", "-redis-cluster", "127.0.0.1:7000", "-redis-sentinel", "m@127.0.0.1:26379"},
			"geocoding: -redis-cluster and -redis-sentinel: give one of -redis-url, -redis-sentinel and -redis-cluster, not 2\n"},
		{[]string{"-store", "redis", "-redis-cluster", "127.0.0.1:7000", "-redis-sentinel", "m@127.0.0.1:26379", "-redis-url", "redis://127.0.0.1:6379/0"},
			"geocoding: -redis-cluster, -redis-sentinel and -redis-url: give one of -redis-url, -redis-sentinel and -redis-cluster, not 3\n"},
		{[]string{"-redis-sentinel", "m@127.0.0.1:26379"}, "geocoding: -redis-sentinel m@127.0.0.1:26379: needs -store redis\n"},
		{[]string{"-redis-cluster", "127.0.0.1:7000"}, "geocoding: -redis-cluster 127.0.0.1:7000: needs -store redis\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stderr := runExit(t, tc.args...)
			assert.Equal(t, 2, code)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "s3cret")
			assert.NotContains(t, stderr, "listening")
		})
	}
}

// TestRedisFlagsAccepted: -redis-sentinel or -redis-cluster beside the
// default of -redis-url is one Redis flag, not two.
func TestRedisFlagsAccepted(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "redis", "-redis-sentinel", "mymaster@127.0.0.1:26379, 127.0.0.1:26380"},
		{"-store", "redis", "-redis-cluster", "127.0.0.1:7000,127.0.0.1:7001,[::1]:7002"},
		{"-store", "redis", "-redis-url", "rediss://:pw@redis.example:6380/3"},
		{"-store", "redis", "-redis-url", "unix:///run/redis.sock?db=2"},
	} {
		var cfg config
		fs := newFlagSet(&cfg)
		require.NoError(t, fs.Parse(args))
		cfg.redisGiven = givenFlags(fs, redisFlags)
		assert.Len(t, cfg.redisGiven, 1, "%q", args)
		assert.NoError(t, cfg.check(), "%q", args)
	}
}

// startSentinel starts a Sentinel on a free loopback port that watches
// the master at addr under the name master, waits until it names it, and
// returns its address. The Sentinel is killed when the test ends.
func startSentinel(t *testing.T, master, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sentinel := l.Addr().String()
	require.NoError(t, l.Close())
	host, port, _ := net.SplitHostPort(addr)
	_, sport, _ := net.SplitHostPort(sentinel)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // a Sentinel rewrites it: absolute, writable
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n", sport, dir, master, host, port), 0o600))
	cmd := exec.Command("redis-server", conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hp, err := sc.GetMasterAddrByName(context.Background(), master).Result()
		if err == nil && len(hp) == 2 && net.JoinHostPort(hp[0], hp[1]) == addr {
			return sentinel
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel at %s does not name the master: %v %v", sentinel, hp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisSentinel: with -redis-sentinel, the store is the master that
// the Sentinel names: the limits hold there (its keys are in the master),
// and the start-up line names the Sentinels, not a -redis-url.
func TestRedisSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := startSentinel(t, "geo", master.Addr)
	arg := "geo@" + sentinel
	h, _ := newTestHandler(t, "-store", "redis", "-redis-sentinel", arg)
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	assert.Equal(t, append(repeat(200, 10), 429), statuses(h, req, 11))
	keys, err := master.Client().Keys(context.Background(), "geocoding:*").Result()
	require.NoError(t, err)
	assert.NotEmpty(t, keys, "the state is in the master")

	_, log := startServerLog(t, "-store", "redis", "-redis-sentinel", arg, "-on-store-error", "closed")
	assert.Contains(t, listeningLine(t, log.String()), " store=redis redis-sentinel="+arg+" refusal-cache=true ")
	assert.NotContains(t, log.String(), "unreachable")
}

// TestRedisCluster: with -redis-cluster, two servers share the quotas of
// keys on every node of a three-node cluster.
func TestRedisCluster(t *testing.T) {
	_, nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	arg := strings.Join(addrs, ",")
	a, _ := newTestHandler(t, "-store", "redis", "-redis-cluster", arg)
	b, _ := newTestHandler(t, "-store", "redis", "-redis-cluster", nodes[1].Addr)
	for i := range 6 { // keys in slots of more than one node
		req := request{target: "/geocode?q=paris", apiKey: "client-" + strconv.Itoa(i)}
		got := append(statuses(a, req, 6), statuses(b, req, 6)...)
		assert.Equal(t, append(repeat(200, 10), 429, 429), got, "key %d", i)
	}

	_, log := startServerLog(t, "-store", "redis", "-redis-cluster", arg, "-on-store-error", "closed")
	assert.Contains(t, listeningLine(t, log.String()), " store=redis redis-cluster="+arg+" refusal-cache=true ")
	assert.NotContains(t, log.String(), "unreachable")
}

// TestStartupWarnsOpen: with -store redis and -on-store-error open (the
// default), the server warns once, before it serves, that an outage of
// Redis leaves every request without a limit; with closed or local, or
// the memory store, it does not; -help says it too.
func TestStartupWarnsOpen(t *testing.T) {
	const consequence = "while Redis is unavailable every request is served without a limit"
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr + "/0"
	_, log := startServerLog(t, "-store", "redis", "-redis-url", url)
	text := log.String()
	assert.Equal(t, 1, strings.Count(text, consequence), "once:\n%s", text)
	assert.Contains(t, text, `level=WARN msg="geocoding: -on-store-error open: `+consequence)
	assert.Less(t, strings.Index(text, consequence), strings.Index(text, "listening on"), "before serving")

	for _, args := range [][]string{
		{"-store", "redis", "-redis-url", url, "-on-store-error", "closed"},
		{"-store", "redis", "-redis-url", url, "-on-store-error", "local"},
		{"-on-store-error", "open"},
	} {
		_, log := startServerLog(t, args...)
		assert.NotContains(t, log.String(), consequence, "%q", args)
	}

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"-help"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "open (the default: "+consequence+")")
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key,
// made with crypto/x509, into dir, and returns their paths.
func writeCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	require.NoError(t, err)
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600))
	return cert, key
}

// TestStartupTLSMismatch: a rediss:// URL for a plain Redis, and a
// redis:// URL for a Redis that speaks only TLS on that port, are named so
// at start-up, with the scheme to use; the right scheme works. One
// redis-server serves both: plain on its port, TLS on --tls-port.
func TestStartupTLSMismatch(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tlsAddr := l.Addr().String()
	require.NoError(t, l.Close())
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	cert, key := writeCert(t, t.TempDir())
	srv := redistest.Start(t, "--tls-port", tlsPort, "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no")

	_, log := startServerLog(t, "-store", "redis", "-redis-url", "rediss://"+srv.Addr+"/0", "-on-store-error", "closed")
	assert.Contains(t, log.String(), `geocoding: Redis is unreachable; serving with -on-store-error closed until it answers" redis=`+srv.Addr+
		` db=0 cause="the server at `+srv.Addr+` answers plain Redis, not TLS, which rediss:// asks for: use redis://" err=`)

	_, log = startServerLog(t, "-store", "redis", "-redis-url", "redis://"+tlsAddr+"/0", "-on-store-error", "closed")
	assert.Contains(t, log.String(), `geocoding: Redis is unreachable; serving with -on-store-error closed until it answers" redis=`+tlsAddr+
		` db=0 cause="the server at `+tlsAddr+` speaks TLS: use rediss://" err=`)

	base, log := startServerLog(t, "-store", "redis", "-redis-url", "rediss://"+tlsAddr+"/0?skip_verify=true", "-on-store-error", "closed")
	assert.NotContains(t, log.String(), "unreachable", "TLS to the TLS port")
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
