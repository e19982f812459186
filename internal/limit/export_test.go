package limit

import "context"

// ReadShareView reads s's view of the named limit under key now, as the
// background refresh does (tests: the view a take then decides on).
func ReadShareView(ctx context.Context, s *Store, key string) { s.readView(ctx, key, nil) }
