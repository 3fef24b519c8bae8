// The console's build: `make console` runs it; the output is served by the API at /console.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  // Relative: the console works under any prefix (an API Gateway stage, a proxy path).
  base: "./",
  build: {
    outDir: fileURLToPath(new URL("../functions/sluice/console/static", import.meta.url)),
    emptyOutDir: true,
    // The page's Content-Security-Policy allows no inline script, style or data: asset.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    reportCompressedSize: false,
  },
});
