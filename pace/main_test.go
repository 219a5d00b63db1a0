package pace_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every wait ends with its request: no test may leave a goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
