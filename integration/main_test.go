package integration

import (
	"os"
	"testing"

	"github.com/kstate/kstate/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
