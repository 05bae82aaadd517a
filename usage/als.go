package usage

import (
	"errors"
	"io"
	"log/slog"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Service is Envoy's access log service (envoy.service.accesslog.v3.AccessLogService): each
// Envoy keeps one StreamAccessLogs stream open and sends batches of HTTP log entries on it.
type Service struct {
	Agg *Aggregator
	// Resolve ties requests without key metadata to an endpoint by host name.
	Resolve Resolver
	Log     *slog.Logger
	// Tokens, when set, is told the tokens of every request that passed the key check, as its
	// entry arrives: the limits' token counts (auth/limits), counted once, by the replica whose
	// access-log stream carried the entry.
	Tokens TokenCounter
}

// TokenCounter counts the tokens of finished requests against limits.
type TokenCounter interface {
	Count(tenant, keyID string, tokens int64, at time.Time)
}

// NewService returns a service feeding agg; resolve may be nil (then only requests that
// passed the key check are attributed).
func NewService(agg *Aggregator, resolve Resolver, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{Agg: agg, Resolve: resolve, Log: log}
}

// rawStreamer is the handler type of serviceDesc.
type rawStreamer interface {
	streamRaw(grpc.ServerStream) error
}

// serviceDesc is AccessLogService with a handler that receives each message undecoded: the
// message is read into an Empty, which keeps every field as unknown bytes (the default proto
// codec does that for free), and wire.go decodes only what it needs. Same name, method and
// wire format as accesslogv3.AccessLogService_ServiceDesc.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: accesslogv3.AccessLogService_ServiceDesc.ServiceName,
	HandlerType: (*rawStreamer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "StreamAccessLogs",
		ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(rawStreamer).streamRaw(stream)
		},
	}},
	Metadata: accesslogv3.AccessLogService_ServiceDesc.Metadata,
}

// Register adds the service to a gRPC server.
func (s *Service) Register(g grpc.ServiceRegistrar) { g.RegisterService(&serviceDesc, s) }

// streamRaw folds every batch into the aggregator until Envoy closes the stream.
func (s *Service) streamRaw(stream grpc.ServerStream) error {
	var node string
	var batch []Entry
	for {
		var msg emptypb.Empty
		err := stream.RecvMsg(&msg)
		if errors.Is(err, io.EOF) {
			return stream.SendMsg(&accesslogv3.StreamAccessLogsResponse{})
		}
		if err != nil {
			// The client went away or the server is stopping: Envoy reconnects on its own.
			s.Log.Debug("access log stream ended", "node", node, "err", err)
			return err
		}
		var id string
		var skipped int
		batch, id, skipped, err = decodeMessage(msg.ProtoReflect().GetUnknown(), s.Resolve, batch[:0])
		if err != nil {
			s.Log.Warn("bad access log message", "node", node, "err", err)
			return status.Errorf(codes.InvalidArgument, "access log message: %v", err)
		}
		if id != "" {
			node = id
		}
		if len(batch) > 0 {
			s.Agg.Add(batch...)
			if s.Tokens != nil {
				for i := range batch {
					if e := &batch[i]; e.KeyID != "" && !e.Denied && e.TokensIn+e.TokensOut > 0 {
						s.Tokens.Count(e.Payer(), e.KeyID, e.TokensIn+e.TokensOut, e.Done)
					}
				}
			}
		}
		if skipped > 0 {
			s.Agg.Unattributed(skipped)
		}
	}
}
