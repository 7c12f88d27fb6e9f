package wire

import (
	"encoding/json"
	"fmt"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"

	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

var RiskFromProto = map[pb.ToolRisk]tools.Risk{
	pb.ToolRisk_TOOL_RISK_UNSPECIFIED: tools.RiskHigh, pb.ToolRisk_TOOL_RISK_READ: tools.RiskRead,
	pb.ToolRisk_TOOL_RISK_WRITE: tools.RiskWrite, pb.ToolRisk_TOOL_RISK_HIGH: tools.RiskHigh,
}

var RiskToProto = map[tools.Risk]pb.ToolRisk{tools.RiskRead: pb.ToolRisk_TOOL_RISK_READ, tools.RiskWrite: pb.ToolRisk_TOOL_RISK_WRITE, tools.RiskHigh: pb.ToolRisk_TOOL_RISK_HIGH}

func ToolSpecToProto(t tools.Tool) *pb.ToolSpec {
	return &pb.ToolSpec{Name: t.Name, Description: t.Description, InputSchemaJson: string(t.InputSchema), Risk: RiskToProto[t.Risk]}
}

func ToolSpecsFromProto(specs []*pb.ToolSpec) ([]tools.Tool, error) {
	out := make([]tools.Tool, len(specs))
	for i, s := range specs {
		risk, ok := RiskFromProto[s.GetRisk()]
		if !ok {
			return nil, run.Invalid(fmt.Sprintf("tools[%d].risk", i), "%d is not a risk of the API", s.GetRisk())
		}
		out[i] = tools.Tool{Name: s.GetName(), Description: s.GetDescription(), Risk: risk}
		if s.GetInputSchemaJson() != "" {
			out[i].InputSchema = json.RawMessage(s.GetInputSchemaJson())
		}
	}
	return out, nil
}
