package main

import (
	"encoding/json"
	"fmt"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/spf13/cobra"
)

// transcriptFormats are the response formats a transcription can be asked for.
var transcriptFormats = []string{"json", "text", "verbose_json", "srt", "vtt"}

func newTranscribeCmd() *cobra.Command {
	var (
		ef       endpointFlags
		language string
		format   string
	)
	cmd := &cobra.Command{
		Use:   "transcribe <endpoint> FILE",
		Short: "Transcribe an audio file on a Parakeet job's endpoint",
		Long: `transcribe sends an audio file to a Parakeet job's POST /v1/audio/transcriptions with the
official OpenAI client and prints the transcript: its text for --format json (the default),
the server's answer as it is for text, verbose_json, srt and vtt.

The endpoint and API key are given as for chat (see "chat --help").`,
		Example: `  inferplane transcribe asr.acme meeting.wav
  inferplane transcribe asr.acme meeting.wav --language de --format srt > meeting.srt`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(transcriptFormats, format) {
				return usageErr(fmt.Errorf("--format %q: expected one of %s", format, strings.Join(transcriptFormats, ", ")))
			}
			audio, err := openAudio(args[1])
			if err != nil {
				return err
			}
			defer audio.Close()
			cn, err := ef.connect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			params := openai.AudioTranscriptionNewParams{
				File:           openai.File(audio, filepath.Base(args[1]), audioType(args[1])),
				Model:          openai.AudioModel(cn.model),
				ResponseFormat: openai.AudioResponseFormat(format),
			}
			if language != "" {
				params.Language = openai.String(language)
			}
			out := cmd.OutOrStdout()
			if format == "json" {
				resp, err := cn.c.Audio.Transcriptions.New(cmd.Context(), params)
				if err != nil {
					return cn.explain(err)
				}
				_, err = fmt.Fprintln(out, resp.Text)
				return err
			}
			// Other answers are printed as the server sent them.
			if format == "verbose_json" {
				var raw json.RawMessage
				if err := cn.c.Post(cmd.Context(), "audio/transcriptions", params, &raw); err != nil {
					return cn.explain(err)
				}
				_, err = fmt.Fprintf(out, "%s\n", raw)
				return err
			}
			var body string
			if err := cn.c.Post(cmd.Context(), "audio/transcriptions", params, &body); err != nil {
				return cn.explain(err)
			}
			_, err = fmt.Fprint(out, body)
			return err
		},
	}
	ef.register(cmd.Flags())
	cmd.Flags().StringVar(&language, "language", "", "language of the audio (ISO-639-1, e.g. en); default: detected")
	cmd.Flags().StringVar(&format, "format", "json", "response format: "+strings.Join(transcriptFormats, ", "))
	return cmd
}

// audioType is the file's media type by its extension, for the multipart part.
func audioType(path string) string {
	if t := mime.TypeByExtension(filepath.Ext(path)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// openAudio opens the audio file, refusing what is not a readable, non-empty file before
// anything is sent.
func openAudio(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audio file: %w", err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("audio file %s: %w", path, err)
	case !st.Mode().IsRegular():
		f.Close()
		return nil, fmt.Errorf("audio file %s: not a regular file", path)
	case st.Size() == 0:
		f.Close()
		return nil, fmt.Errorf("audio file %s: empty", path)
	}
	return f, nil
}
