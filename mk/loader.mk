# Loader and image transforms (src/data/image_ops.c, src/data/loader.c): the
# driver the OpenCV interop test uses (tests/integration/loader_cv2.py).
IMG_TOOL = $(BUILD)/image-tool
all: $(IMG_TOOL)
$(IMG_TOOL): $(BUILD)/obj/tests/integration/image_tool.o $(BUILD)/libkeel.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libkeel.a $(LDLIBS)

# The resize/normalise loops vectorise at -O3 (about 2x faster per image).
$(BUILD)/obj/src/data/image_ops.o: CFLAGS += -O3
