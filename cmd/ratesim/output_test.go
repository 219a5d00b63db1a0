package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/jsontext"
)

// parseCSV reads ratesim's CSV output with encoding/csv into one map per
// row, checking the header.
func parseCSV(t testing.TB, s string) []map[string]string {
	t.Helper()
	records, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, records)
	require.Equal(t, columns, records[0])
	var rows []map[string]string
	for _, rec := range records[1:] {
		row := make(map[string]string)
		for i, c := range columns {
			row[c] = rec[i]
		}
		rows = append(rows, row)
	}
	return rows
}

var awkwardKeys = []string{
	"plain", "a,b", `say "hi"`, " lead", "\tlead", "\u00a0nbsp", `\.`, `\.x`, "é", "日本", "a\rb", "a\nb",
	"bad\xffutf8", "ctl\x01\x1f", "\u2028\u2029", `back\slash`, "<&>", "-",
}

// The CSV output is what encoding/csv reads back, whatever the key.
func TestCSVQuoting(t *testing.T) {
	for _, k := range awkwardKeys {
		got := appendCSVField(nil, k)
		var want bytes.Buffer
		w := csv.NewWriter(&want)
		require.NoError(t, w.Write([]string{k}))
		w.Flush()
		assert.Equal(t, strings.TrimSuffix(want.String(), "\n"), string(got), "key %q", k)
	}
}

// The JSON output is what encoding/json reads back, whatever the key.
func TestJSONStrings(t *testing.T) {
	for _, k := range awkwardKeys {
		var got string
		b := jsontext.AppendString(nil, k, false)
		require.NoError(t, json.Unmarshal(b, &got), "%s", b)
		marshalled, err := json.Marshal(k)
		require.NoError(t, err)
		var viaStd string
		require.NoError(t, json.Unmarshal(marshalled, &viaStd))
		assert.Equal(t, viaStd, got, "key %q", k)
	}
}

func TestFormats(t *testing.T) {
	res := ratelimit.Result{Remaining: 3, RetryAfter: 1, ResetAfter: 2500e6, Policy: &ratelimit.Policy{Limit: ratelimit.PerSecond(5)}}
	for _, tc := range []struct{ format, want string }{
		{"csv", "time,key,cost,allowed,remaining,retry_after,delay,reset_after\n" +
			"1.5,\"a,b\",2,false,3,0.000000001,0,2.5\n"},
		{"json", `{"time":1.5,"key":"a,b","cost":2,"allowed":false,"remaining":3,"retry_after":0.000000001,"delay":0,"reset_after":2.5}` + "\n"},
		{"table", "        time  result    cost  remaining  retry_after      delay  key\n" +
			"         1.5  DENIED       2          3  0.000000001          -  a,b\n"},
	} {
		var b bytes.Buffer
		o := newOutput(&b, tc.format)
		require.NoError(t, o.start())
		require.NoError(t, o.write(1500e6, "a,b", 2, res))
		require.NoError(t, o.flush())
		assert.Equal(t, tc.want, b.String(), tc.format)
	}
}

// Each JSON line is an object with the CSV's fields.
func TestJSONLines(t *testing.T) {
	stdout, stderr, code := runCLI(t, "0 \"q\"\n0.25 k,1 3\n0.25 k,1 20\n", "-format", "json")
	require.Equal(t, 0, code, stderr)
	sc := bufio.NewScanner(strings.NewReader(stdout))
	var objs []map[string]any
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		assert.Len(t, m, len(columns))
		objs = append(objs, m)
	}
	require.Len(t, objs, 3)
	assert.Equal(t, map[string]any{"time": 0.25, "key": "k,1", "cost": 3.0, "allowed": true, "remaining": 7.0,
		"retry_after": 0.0, "delay": 0.0, "reset_after": 0.6}, objs[1])
	assert.Equal(t, `"q"`, objs[0]["key"])
	assert.Equal(t, false, objs[2]["allowed"])
}

// The table keeps its columns aligned, marks refusals, and escapes keys that
// would break a terminal.
func TestTable(t *testing.T) {
	stdout, stderr, code := runCLI(t, lines("0 k", 11)+"0.2 \x1b[31mred\n123456.000000001 k 0\n", "-algorithm", "leaky-shape")
	require.Equal(t, 0, code, stderr)
	rows := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, rows, 14)
	keyCol := strings.Index(rows[0], "key")
	for _, r := range rows {
		assert.Equal(t, "  ", r[keyCol-2:keyCol], "row %q", r)
	}
	assert.Equal(t, "           0  allowed      1         10            -          -  k", rows[1])
	assert.Equal(t, "           0  allowed      1          0            -          2  k", rows[11])
	assert.Equal(t, "         0.2  allowed      1         10            -          -  \\x1b[31mred", rows[12])
	assert.Equal(t, "123456.000000001  allowed      0         10            -          -  k", rows[13],
		"a value wider than its column pushes the row, and the key stays last")
}
