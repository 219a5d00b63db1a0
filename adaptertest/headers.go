package adaptertest

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// testFieldNames: the adapter sends the rate-limit fields under the very
// names, in the very order, that the reference sends, byte for byte (the
// drafts' spelling, "RateLimit-Policy:" and "RateLimit:"), on an admitted
// and on a refused request.
func testFieldNames(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute)})
	for _, status := range []string{"200 OK", "429 Too Many Requests"} {
		want := rawRateLimitLines(t, f.ref, "alice", status)
		got := rawRateLimitLines(t, f.adapter, "alice", status)
		assert.Equal(t, want, got, "%s: the rate-limit field lines as sent", status)
		var names []string
		for _, line := range got {
			name, _, _ := strings.Cut(line, ":")
			names = append(names, name)
		}
		assert.Equal(t, []string{"RateLimit-Policy", "RateLimit"}, names, "%s: the field names as the drafts spell them", status)
	}
}

// rawRateLimitLines sends a GET for client to sd over a plain TCP
// connection, requires the status line "HTTP/1.1 " + status, and returns
// the header field lines whose name contains "ratelimit" in any case,
// byte for byte as they came, sorted.
func rawRateLimitLines(t *testing.T, sd *side, client, status string) []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", sd.srv.Listener.Addr().String(), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, "GET /geocode HTTP/1.1\r\nHost: adaptertest\r\n"+keyHeader+": "+client+"\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	var lines []string
	for i := 0; ; i++ {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "reading the response head")
		line = strings.TrimSuffix(line, "\r\n")
		if line == "" {
			break
		}
		if i == 0 {
			require.Equal(t, "HTTP/1.1 "+status, line, "status line")
			continue
		}
		if name, _, _ := strings.Cut(line, ":"); strings.Contains(strings.ToLower(name), "ratelimit") {
			lines = append(lines, line)
		}
	}
	io.Copy(io.Discard, br)
	slices.Sort(lines)
	return lines
}
