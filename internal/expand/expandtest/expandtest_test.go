package expandtest_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/expand/expandtest"
)

func TestWriteItems(t *testing.T) {
	for _, n := range []int{0, 1, 4} {
		var b bytes.Buffer
		require.NoError(t, expandtest.WriteItems(&b, n))
		var doc struct {
			Items []struct{ ID, Path, Region string }
		}
		require.NoError(t, json.Unmarshal(b.Bytes(), &doc), b.String())
		require.Len(t, doc.Items, n)
		for i, it := range doc.Items {
			require.Equal(t, expandtest.Regions[i%3], it.Region)
			require.Equal(t, "images/"+it.ID+".jpg", it.Path)
		}
	}
	var b bytes.Buffer
	require.NoError(t, expandtest.WriteItems(&b, 2))
	require.Equal(t, "{\"items\":[\n{\"id\":\"item-0000001\",\"path\":\"images/item-0000001.jpg\",\"region\":\"eu\"},\n{\"id\":\"item-0000002\",\"path\":\"images/item-0000002.jpg\",\"region\":\"us\"}\n]}\n", b.String())
}
