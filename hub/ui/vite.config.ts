// Vite builds the UI into dist/, which is committed and embedded in the hub binary (hub/src/ui.rs).
// Every URL in the build is relative (`base: './'`) and the page's <base href> is filled in by the
// hub at serve time, so the same build works at `/` and under `http.base_path`.
import type { Plugin } from 'vite';
import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// The placeholder the hub replaces with its base path; the dev server serves at the root.
const BASE_PLACEHOLDER = '__BANHUB_BASE_HREF__';

function devBaseHref(): Plugin {
  return {
    name: 'banhub-dev-base-href',
    apply: 'serve',
    transformIndexHtml: (html) => html.replace(BASE_PLACEHOLDER, '/'),
  };
}

// `npm run dev` forwards the API to a running hub (BANHUB_URL, default http://127.0.0.1:8080).
const hub = process.env.BANHUB_URL ?? 'http://127.0.0.1:8080';

export default defineConfig({
  base: './',
  plugins: [svelte(), devBaseHref()],
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    // Reproducible output: CI rebuilds and compares byte for byte.
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
  server: {
    proxy: {
      '/api': { target: hub, changeOrigin: false },
      '/auth': { target: hub, changeOrigin: false },
    },
  },
  resolve: process.env.VITEST ? { conditions: ['browser'] } : undefined,
  test: {
    include: ['tests/unit/**/*.test.ts'],
    setupFiles: ['tests/unit/setup.ts'],
    environment: 'node',
  },
});
