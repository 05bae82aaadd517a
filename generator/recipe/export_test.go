package recipe

// FeatureOrder is the order a request's features are emitted in (the master lists them
// sorted), for the upstream oracle test.
func FeatureOrder(b *Book, req Request) []string {
	d, err := b.derive(req)
	if err != nil {
		return nil
	}
	return d.features
}
