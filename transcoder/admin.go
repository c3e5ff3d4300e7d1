package transcoder

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
)

// NewAdmin returns the admin REST handler: grpc-gateway over
// flexway.v1.AdminService, reached through conn (the in-process channel,
// so that admin calls pass the interceptor chain and its admin-key check).
// It serves /flexway/v1/...; JSON is protojson with every field written
// (an empty agent, a false soft) and int64 values as strings. Errors,
// unknown paths included, are RFC 9457 problem details with Flexway's
// reason as "code".
func NewAdmin(conn grpc.ClientConnInterface) (http.Handler, error) {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		runtime.WithErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
			writeFaultProblem(w, r, toFault(err))
		}),
		// A tenant or agent name keeps its escaped slashes: acme%2Fx is one
		// (unknown) name, not two path segments.
		runtime.WithUnescapingMode(runtime.UnescapingModeAllExceptReserved),
		runtime.WithRoutingErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
			if status == http.StatusMethodNotAllowed {
				// Every admin route is a GET.
				w.Header().Set("Allow", "GET")
				fe := faults.New(faults.InvalidRequest, "method %s is not allowed on %s", r.Method, r.URL.Path)
				writeProblem(w, r, Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: fe.Message, Code: string(fe.Reason)})
				return
			}
			writeFaultProblem(w, r, faults.New(faults.NotFound, "no route for %s %s", r.Method, r.URL.Path))
		}),
	)
	if err := flexwayv1.RegisterAdminServiceHandlerClient(context.Background(), mux, flexwayv1.NewAdminServiceClient(conn)); err != nil {
		return nil, err
	}
	return mux, nil
}
