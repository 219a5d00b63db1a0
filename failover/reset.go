package failover

import (
	"context"
	"errors"
	"fmt"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.ResetStore = (*Store)(nil)

// Reset implements [ratelimit.ResetStore]: it forgets key's bucket under p
// in the primary and, in Local mode, in the Local store too. It asks the
// primary even while degraded. It returns the primary's error, joined with
// the Local store's, or an error wrapping [errors.ErrUnsupported] that
// names a store that is not a ResetStore.
func (f *Store) Reset(ctx context.Context, p *ratelimit.Policy, key string) error {
	primary, ok := f.primary.(ratelimit.ResetStore)
	if !ok {
		return fmt.Errorf("failover: Reset: the primary store, a %T, cannot forget a key (%w): it does not implement ratelimit.ResetStore", f.primary, errors.ErrUnsupported)
	}
	var localErr error
	if f.cfg.Mode == Local {
		if local, ok := f.cfg.Local.(ratelimit.ResetStore); ok {
			if err := local.Reset(ctx, f.share(p, 0), key); err != nil {
				localErr = fmt.Errorf("failover: the Local store: %w", err)
			}
		} else {
			localErr = fmt.Errorf("failover: Reset: the Local store, a %T, cannot forget a key (%w): it does not implement ratelimit.ResetStore", f.cfg.Local, errors.ErrUnsupported)
		}
	}
	err := primary.Reset(ctx, p, key)
	f.failed(ctx, f.health(p, key), err, 0)
	return errors.Join(err, localErr)
}
