// Files sent with a message: the composer's picker (the attach button, drag and drop, paste), the
// chips of the files chosen, and the files shown in the user's message bubbles.
//
// As in app.js, a file's name only ever reaches the page as textContent. Images show from blob:
// URLs: a stored file is served to its owner only, and an <img src> cannot send the API key.

export const ACCEPTED_TYPES = [
  "image/png", "image/jpeg", "image/webp", "image/gif", "application/pdf", "text/plain",
];
const BY_EXTENSION = {
  png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", webp: "image/webp", gif: "image/gif",
  pdf: "application/pdf", txt: "text/plain",
};
const MiB = 1024 * 1024;
// The server's defaults. The server decides; these only spare the user a refused upload.
export const DEFAULT_LIMITS = { maxFileBytes: 10 * MiB, maxTurnBytes: 20 * MiB, maxFiles: 10 };

/** The type a file is sent as: its own, else the one its extension names (as the server guesses). */
export function mediaType(file) {
  const declared = (file.type || "").toLowerCase();
  if (declared && declared !== "application/octet-stream") return declared;
  const extension = file.name.includes(".") ? file.name.split(".").pop().toLowerCase() : "";
  return BY_EXTENSION[extension] || declared;
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < MiB) return `${Math.round(bytes / 1024)} KB`;
  return `${(bytes / MiB).toFixed(1).replace(/\.0$/, "")} MB`;
}

const isImage = (type) => type.startsWith("image/");

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function badge(type) {
  const label = type === "application/pdf" ? "PDF" : type === "text/plain" ? "TXT" : "FILE";
  const icon = element("span", "file-icon", label);
  icon.setAttribute("aria-hidden", "true");
  return icon;
}

// --- files in the messages ----------------------------------------------------------------------

/**
 * The files of messages on screen: `render(files)` makes the list shown in a bubble, from the
 * File values just sent or from a transcript's stored files ({name, media_type, size, url}), whose
 * image bytes come through `fetchBlob(url)` (which sends the key). `release()` frees the blob URLs
 * once the messages are gone.
 */
export function messageFiles(fetchBlob) {
  const urls = new Set();

  function objectUrl(blob) {
    const url = URL.createObjectURL(blob);
    urls.add(url);
    return url;
  }

  function item(file) {
    const stored = !(file instanceof Blob);
    const type = stored ? file.media_type : mediaType(file);
    const entry = element("li", `file ${isImage(type) ? "image" : "document"}`);
    entry.title = `${file.name} (${formatSize(file.size)})`;
    if (!isImage(type)) {
      entry.append(badge(type), element("span", "file-name", file.name));
      return entry;
    }
    const image = element("img");
    image.alt = file.name;
    entry.append(image);
    if (!stored) {
      image.src = objectUrl(file);
    } else {
      fetchBlob(file.url).then(
        (blob) => { image.src = objectUrl(blob); },
        () => { // gone or not ours: the name still says what was sent
          entry.className = "file document missing";
          entry.replaceChildren(badge(type), element("span", "file-name", file.name));
        },
      );
    }
    return entry;
  }

  return {
    render(files) {
      const list = element("ul", "files");
      list.setAttribute("aria-label", files.length === 1 ? "1 file" : `${files.length} files`);
      list.append(...files.map(item));
      return list;
    },
    release() {
      for (const url of urls) URL.revokeObjectURL(url);
      urls.clear();
    },
  };
}

// --- the composer's files -----------------------------------------------------------------------

/**
 * The files chosen for the next message, shown as removable chips. Files come from the attach
 * button's file input, a drop anywhere on `dropZone`, or a paste into `textarea`. Each is checked
 * against `limits` first; `say(text)` tells the user what was refused ("" once all is well).
 */
export function createPicker({ button, input, chips, dropZone, dropHint, textarea, limits, say }) {
  let chosen = []; // [{file, url}]
  let enabled = true;
  let dragDepth = 0;

  const entryFor = (file) => ({ file, url: isImage(mediaType(file)) ? URL.createObjectURL(file) : null });

  function refusal(file, type, total, count) {
    const name = `“${file.name}”`;
    if (!ACCEPTED_TYPES.includes(type)) {
      return `${name} cannot be sent: only PNG, JPEG, WebP and GIF images, PDFs and plain text files can.`;
    }
    if (file.size === 0) return `${name} is empty.`;
    if (file.size > limits.maxFileBytes) {
      return `${name} is ${formatSize(file.size)}; a file may be at most ${formatSize(limits.maxFileBytes)}.`;
    }
    if (count >= limits.maxFiles) return `A message can carry at most ${limits.maxFiles} files.`;
    if (total + file.size > limits.maxTurnBytes) {
      const most = formatSize(limits.maxTurnBytes);
      return `${name} does not fit: the files of one message may total at most ${most}.`;
    }
    return null;
  }

  function add(files) {
    const problems = [];
    let total = chosen.reduce((sum, { file }) => sum + file.size, 0);
    for (const file of files) {
      const known = chosen.some(({ file: other }) => other.name === file.name && other.size === file.size
        && other.lastModified === file.lastModified);
      if (known) continue;
      const type = mediaType(file);
      const problem = refusal(file, type, total, chosen.length);
      if (problem) {
        problems.push(problem);
        continue;
      }
      total += file.size;
      chosen.push(entryFor(file));
    }
    say(problems.join(" "));
    show();
  }

  function remove(index) {
    const [gone] = chosen.splice(index, 1);
    if (gone.url) URL.revokeObjectURL(gone.url);
    show();
    // Keep the keyboard where it was: on the next chip's remove button, else back on the button.
    const next = chips.querySelectorAll("button.remove")[Math.min(index, chosen.length - 1)];
    (next || button).focus();
  }

  function chip({ file, url }, index) {
    const entry = element("li", "chip");
    entry.title = `${file.name} (${formatSize(file.size)})`;
    if (url) {
      const image = element("img");
      image.src = url;
      image.alt = "";
      entry.append(image);
    } else {
      entry.append(badge(mediaType(file)));
    }
    entry.append(element("span", "file-name", file.name), element("span", "file-size", formatSize(file.size)));
    const removal = element("button", "remove", "×");
    removal.type = "button";
    removal.disabled = !enabled;
    removal.setAttribute("aria-label", `Remove ${file.name}`);
    removal.addEventListener("click", () => remove(index));
    entry.append(removal);
    return entry;
  }

  function show() {
    chips.replaceChildren(...chosen.map(chip));
    chips.hidden = chosen.length === 0;
  }

  function setDropping(on) {
    dropZone.classList.toggle("dropping", on);
    dropHint.hidden = !on;
  }

  const carriesFiles = (event) => Boolean(event.dataTransfer)
    && [...event.dataTransfer.types].includes("Files");

  button.addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    add([...input.files]);
    input.value = ""; // choosing the same file again is a change too
  });
  dropZone.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event) || !enabled) return;
    event.preventDefault();
    dragDepth += 1;
    setDropping(true);
  });
  dropZone.addEventListener("dragover", (event) => {
    if (!carriesFiles(event) || !enabled) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
  });
  dropZone.addEventListener("dragleave", () => {
    dragDepth = Math.max(0, dragDepth - 1);
    if (dragDepth === 0) setDropping(false);
  });
  dropZone.addEventListener("drop", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    dragDepth = 0;
    setDropping(false);
    if (enabled) add([...event.dataTransfer.files]);
  });
  // A file dropped beside the chat must not replace the page with itself.
  for (const name of ["dragover", "drop"]) {
    window.addEventListener(name, (event) => { if (carriesFiles(event)) event.preventDefault(); });
  }
  textarea.addEventListener("paste", (event) => {
    const files = event.clipboardData ? [...event.clipboardData.files] : [];
    if (!files.length || !enabled) return;
    event.preventDefault();
    add(files);
  });

  return {
    /** The files chosen, in order. */
    files: () => chosen.map(({ file }) => file),
    /** Hands the files over for sending and empties the chips. */
    take() {
      const files = chosen.map(({ file }) => file);
      for (const { url } of chosen) if (url) URL.revokeObjectURL(url);
      chosen = [];
      show();
      return files;
    },
    /** Puts files back (a refused turn): nothing the user chose is lost. */
    restore(files) {
      chosen = files.map(entryFor);
      show();
    },
    setEnabled(on) {
      enabled = on;
      button.disabled = !on;
      for (const removal of chips.querySelectorAll("button.remove")) removal.disabled = !on;
    },
  };
}
