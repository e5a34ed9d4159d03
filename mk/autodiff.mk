# Autodiff on the graph IR (src/graph/autodiff.c): the driver the PyTorch
# gradient parity test uses (tests/integration/autodiff_torch.py).
AD_TOOL = $(BUILD)/autodiff-tool
all: $(AD_TOOL)
$(AD_TOOL): $(BUILD)/obj/tests/integration/autodiff_tool.o $(BUILD)/libkeel.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libkeel.a $(LDLIBS)

# The gradient kernels' simple loops (ReLU/sigmoid/tanh gradients, batch and
# layer norm backward, col2im, pooling) vectorise at -O3.
$(BUILD)/obj/src/graph/ops_grad.o $(BUILD)/obj/src/graph/grad_nn.o: CFLAGS += -O3
